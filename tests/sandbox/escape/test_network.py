"""No network: not the test's listener on 127.0.0.1, not Redis, not a unix socket in the host's
/tmp; neither directly nor after joining the network namespace of another process (setns)."""

from __future__ import annotations

import pytest

from tests.sandbox.test_isolation import assert_next_evaluation_works

from . import checks
from .support import SIDES, evaluate_hostile


@pytest.mark.parametrize("side", SIDES)
def test_loopback_redis_and_host_sockets_are_unreachable(quick, cfg, listener, side):
    res, rep = evaluate_hostile(quick, side, "network", cfg)
    checks.network(rep, listener)
    assert_next_evaluation_works(quick)


@pytest.mark.parametrize("side", SIDES)
def test_cannot_join_another_network_namespace(quick, cfg, listener, side):
    res, rep = evaluate_hostile(quick, side, "join_network", cfg)
    checks.joined_network(rep, listener)
    assert_next_evaluation_works(quick)
