"""The hostile code is written the way an attacker would: it passes the static source scan and
holds none of the names a scanner greps for. So the other tests exercise the containment, not the
scanner."""

from __future__ import annotations

import pytest

from sandbox import audit

from . import hostile

CFG = {
    "token": "0" * 12,
    "port": 9,
    "unix": "/tmp/x",
    "redis_port": 6379,
    "host_pidns": 1,
    "marker": "/tmp/x",
    "name": "kwd",
    "heartbeat": "/tmp/x",
    "lifetime": 1,
    "read": {},
    "list": {},
    "create": {},
    "open": {},
}
GREPPED = ("/proc", "os.fork", "fork(", "setns", "environ", "ptrace", "process_vm", "subprocess", "os.system")


@pytest.mark.parametrize("attack", sorted(hostile.ATTACKS))
def test_hostile_code_passes_the_static_scan(attack):
    files = hostile.candidate(attack, CFG)
    assert audit.scan_source(files) == [] and audit.scan_native(files) == []
    for text in (files["model_new.py"], hostile.task(attack, CFG)):
        assert not [w for w in GREPPED if w in text]
