"""Tests for kerasdist/engines/strategy.py: strategies by name, and clear refusals."""

import pytest

from kerasdist.engines.strategy import make_strategy
from kerasdist.errors import KerasdistError


@pytest.mark.parametrize(
    "name, replicas, expected",
    [("default", 1, 1), ("one_device", 1, 1), ("mirrored", 2, 2), ("central_storage", 2, 2)],
)
def test_strategy_has_the_requested_replicas(name, replicas, expected, capsys):
    strategy = make_strategy(name, replicas)
    assert strategy.num_replicas_in_sync == expected
    assert f"Number of devices: {expected}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "name, needs", [("parameter_server", "needs a cluster"), ("tpu", "needs a TPU")]
)
def test_strategies_that_cannot_run_here_say_what_they_need(name, needs):
    with pytest.raises(KerasdistError, match=needs):
        make_strategy(name)


def test_unknown_strategy_lists_the_allowed_names():
    with pytest.raises(KerasdistError, match=r"Received: strategy='mirored'; allowed: default"):
        make_strategy("mirored")
