import logging

import pytest
from check_shapes import set_enable_check_shapes


@pytest.fixture(autouse=True)
def _check_shapes_enabled():
    """Run every test with GPflow's shape checks on, as GPflow's own suite does."""
    set_enable_check_shapes(True)
    yield


@pytest.fixture(autouse=True)
def _no_autograph_fallback(caplog):
    """Fail a test whose compiled code silently fell back to Python control flow."""
    with caplog.at_level(logging.WARNING):
        yield
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "AutoGraph could not transform" in m]
