"""One source for each option list: a function that passes its options on to another (a named
model to :class:`~gpflow_svi_gplvm.models.base.SVIGPLVM`, ``fit`` to
:class:`~gpflow_svi_gplvm.training.trainer.Trainer`) takes them as ``**options`` and shows the
other's
as its own, with their defaults, to ``help()``, ``inspect.signature`` and the documentation."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection
from typing import TypeVar

__all__ = ["takes_options_of"]

F = TypeVar("F", bound=Callable)

_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
_KEYWORD = inspect.Parameter.KEYWORD_ONLY


def takes_options_of(base: Callable, omit: Collection[str] = ()) -> Callable[[F], F]:
    """Give the decorated function the signature of its own parameters (but its ``*args`` and
    ``**options``) and ``base``'s other parameters (but ``omit``): the positional ones first
    (its own defaults replacing ``base``'s, e.g. another ``num_samples``), then its own
    keyword-only ones, then ``base``'s. ``base``'s ``self`` is left out unless the function
    has one; without ``*args``, ``base``'s other parameters are keyword-only."""
    shared = inspect.signature(base).parameters

    def decorate(function: F) -> F:
        given = inspect.signature(function).parameters
        own = {name: p for name, p in given.items() if p.kind not in _VARIADIC}
        inherited = [
            own.get(name, p)
            for name, p in shared.items()
            if name not in omit and (name != "self" or "self" in own)
        ]
        passed = [p for p in inherited if p.name not in own]
        if not any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in given.values()):
            # Without *args the function takes base's other options by keyword alone.
            passed = [p.replace(kind=_KEYWORD) for p in passed]
        positional = [p for p in own.values() if p.kind != _KEYWORD]
        positional += [p for p in passed if p.kind != _KEYWORD]
        keyword = [p for p in own.values() if p.kind == _KEYWORD]
        keyword += [p for p in passed if p.kind == _KEYWORD]
        function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            positional + keyword, return_annotation=inspect.signature(function).return_annotation
        )
        return function

    return decorate
