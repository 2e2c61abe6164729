"""One source for each option list: the named models show SVIGPLVM's options, fit Trainer's."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

import gpflow_svi_gplvm as sg
from gpflow_svi_gplvm.options import takes_options_of
from gpflow_svi_gplvm.prediction import functions
from gpflow_svi_gplvm.prediction.functions import NewRowOptions

KEYWORD = inspect.Parameter.KEYWORD_ONLY


def base(self, a, b=1, *, c=2, d=3):
    return a, b, c, d


def test_a_function_shows_its_own_parameters_then_the_base_ones():
    @takes_options_of(base, omit=("d",))
    def wrapper(self, *args, e=4, **options):
        return base(self, *args, **options)

    parameters = inspect.signature(wrapper).parameters
    assert list(parameters) == ["self", "a", "b", "e", "c"]
    assert parameters["b"].default == 1 and parameters["c"].default == 2
    assert parameters["e"].kind == parameters["c"].kind == KEYWORD


def test_without_args_the_base_options_are_keyword_only_and_own_defaults_win():
    @takes_options_of(base)
    def wrapper(a, c=5, **options):
        return base(None, a, c=c, **options)

    parameters = inspect.signature(wrapper).parameters
    assert list(parameters) == ["a", "c", "b", "d"]  # base's self left out
    assert parameters["c"].default == 5
    assert parameters["b"].kind == parameters["d"].kind == KEYWORD


SHARED = inspect.signature(sg.SVIGPLVM).parameters


@pytest.mark.parametrize("model", sorted(sg.models.MODELS.values(), key=lambda m: m.__name__))
def test_every_named_model_shows_every_shared_option_with_its_default(model):
    parameters = inspect.signature(model).parameters
    assert "latent" not in parameters
    for name, shared in SHARED.items():
        if name == "latent":
            continue
        own_default = model is sg.FlowBayesianGPLVM and name == "num_samples"
        assert parameters[name].default == (4 if own_default else shared.default), name
        assert parameters[name].kind == shared.kind, name
    assert all(":param latent_init:" in doc for doc in (model.__doc__, model.__init__.__doc__))


def test_the_models_own_options_come_before_the_shared_keywords():
    names = list(inspect.signature(sg.MAPGPLVM).parameters)
    assert names.index("prior") == names.index("num_samples") + 1
    assert names.index("prior") < names.index("latent_init")


def test_shared_options_reach_the_model_positionally_and_by_keyword():
    Y = np.random.default_rng(0).normal(size=(20, 3))
    model = sg.PointGPLVM(Y, 2, 6, None, None, 1, whiten=False, seed=3)
    assert model.inducing_variable.num_inducing == 6
    assert not model.whiten and model.seed == 3
    with pytest.raises(TypeError, match="no_such_option"):
        sg.MAPGPLVM(Y, 2, no_such_option=1)


def test_fit_shows_every_trainer_option_keyword_only_with_its_default():
    fit = inspect.signature(sg.fit).parameters
    trainer = inspect.signature(sg.Trainer).parameters
    assert list(fit)[:3] == ["model", "data", "iterations"]
    for name, option in list(trainer.items())[2:]:
        assert fit[name].default == option.default and fit[name].kind == KEYWORD, name
    for name in ("progress", "steps_per_call", "callback", "callback_every"):
        assert fit[name].default == inspect.signature(sg.Trainer.train).parameters[name].default


@pytest.mark.parametrize("name", ["infer_latents", "reconstruct"])
def test_the_new_row_methods_show_the_functions_options(name):
    method = inspect.signature(getattr(sg.SVIGPLVM, name)).parameters
    function = inspect.signature(getattr(functions, name)).parameters
    given = 2 if name == "infer_latents" else 3  # the model (self), the rows and their indices
    assert list(method)[:given][1:] == list(function)[1:given]
    for option, parameter in list(function.items())[given:]:
        assert method[option].default == parameter.default and method[option].kind == KEYWORD


@pytest.mark.parametrize("name", ["infer_latents", "reconstruct"])
def test_an_unknown_option_of_a_new_row_method_is_named(name):
    """Not check_shapes' "Error calling wrapped function" (it once bound the shown signature)."""
    Y = np.random.default_rng(0).normal(size=(12, 3))
    model = sg.PointGPLVM(Y, 2, num_inducing=4)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        getattr(model, name)(Y[:2], bogus=1)


@pytest.mark.parametrize("name", ["infer_latents", "reconstruct", "log_predictive_density"])
def test_the_new_row_functions_show_every_new_row_option_keyword_only(name):
    """One source, ``NewRowOptions``: each field, with its default, after the function's own."""
    shown = inspect.signature(getattr(functions, name)).parameters
    fields = dataclasses.fields(NewRowOptions)
    assert list(shown)[-len(fields) :] == [field.name for field in fields]
    for field in fields:
        assert shown[field.name].default == field.default and shown[field.name].kind == KEYWORD
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        NewRowOptions(bogus=1)
