"""A refused resume, said in ``fit``'s words or in another face's (the command line's flags).

Every refusal to continue a checkpointed run is a :class:`ResumeRefusedError`: what differs and
the ways to go on, whose settings are fields, so that ``fit`` names its arguments
(``latent_dim``, ``batch_size=16``) and the command line its flags (``--latent-dim``,
``--batch-size 16``) in the same sentences, and leaves out a way it has no setting for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

__all__ = ["ResumeRefusedError", "Setting", "keyword_setting"]

Setting = Callable[[str, "str | None"], "str | None"]
"""How a face names a setting, given its name (``fit``'s argument or the model's) and the value
to give, if any; None where the face has no such setting."""

FIT_ELSEWHERE = "use another checkpoint_dir (or start afresh there: overwrite=True)"
"""Where ``fit`` goes instead of resuming: a run of its own."""


def keyword_setting(name: str, value: str | None) -> str:
    """A setting as ``fit`` and the model's constructor take it: ``name`` or ``name=value``."""
    return name if value is None else f"{name}={value}"


class ResumeRefusedError(ValueError):
    """A resume refused: the checkpointed run cannot be continued by this one.

    ``finding`` says what differs and ``ways`` how to resume; each is a format whose fields are
    ``facts`` (inserted as they are) and settings (``{latent_dim}``, or ``{batch_size:16}`` with
    the value to give). A way naming a setting the face lacks is left out; the last way is
    always a run of its own elsewhere. The message says it in ``fit``'s words, :meth:`advice` in
    another face's.
    """

    def __init__(self, finding: str, ways: Sequence[str] = (), **facts: object) -> None:
        self.finding, self.ways, self.facts = finding, tuple(ways), facts
        super().__init__(self.advice(keyword_setting, FIT_ELSEWHERE))

    def advice(self, setting: Setting, elsewhere: str) -> str:
        """The refusal with each setting named by ``setting``, and ``elsewhere`` the way to a
        run of its own."""
        named = _said(self.finding, self.facts, lambda n, v: setting(n, v) or keyword_setting(n, v))
        ways = [_said(way, self.facts, setting) for way in self.ways]
        offered = [way for way in ways if way is not None] + [elsewhere]
        options = offered[0] if len(offered) == 1 else f"{', '.join(offered[:-1])}, or {elsewhere}"
        return f"{named}. {options[:1].upper()}{options[1:]}."


def _said(text: str, facts: Mapping[str, object], setting: Setting) -> str | None:
    """``text`` with its fields filled; None when it names a setting the face lacks."""
    fields = _Fields(facts, setting)
    said = text.format_map(fields)
    return None if fields.lacking else said


class _Fields(dict):
    """A text's fields: its facts, and any other name a setting."""

    def __init__(self, facts: Mapping[str, object], setting: Setting) -> None:
        super().__init__({name: _Fact(value) for name, value in facts.items()})
        self.setting, self.lacking = setting, False

    def __missing__(self, name: str) -> _Named:
        return _Named(name, self)


class _Fact:
    """A fact, inserted as its text."""

    def __init__(self, value: object) -> None:
        self.value = value

    def __format__(self, spec: str) -> str:
        return str(self.value)


class _Named:
    """A setting, named by the face; the format spec is the value to give."""

    def __init__(self, name: str, fields: _Fields) -> None:
        self.name, self.fields = name, fields

    def __format__(self, spec: str) -> str:
        named = self.fields.setting(self.name, spec or None)
        self.fields.lacking |= named is None
        return named or ""
