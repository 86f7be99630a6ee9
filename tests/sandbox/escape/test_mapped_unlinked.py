"""Host disk past the folder bound through files held only by a mapping (red team "hidden_disk"):
the candidate creates files in its own folder, maps each with libc's mmap (which keeps no
descriptor), closes and unlinks it. No name, no descriptor: only /proc/PID/maps still shows it,
and its blocks stay on the host's disk until the child dies. sandbox.workguard counts them
(docs/security.md, "Resources"; tests/sandbox/test_workguard.py checks the count itself).

Two ways to fill them: through the mapping (the red team's), or through the descriptor before
closing it with only the first page mapped (what the mapping shows is then 4 KB of each file).
Limits shrunk as in test_resources.py: a 128 MB folder, 16 MB files up to 3x that."""

from __future__ import annotations

import pytest

from sandbox import audit, evaluate
from sandbox.schema import Status
from tests.sandbox.helpers import task
from tests.sandbox.test_isolation import assert_next_evaluation_works

from . import hostile

WORK_MB = 128

MAP_HIDE = r"""
def _attack():
    r = {'mode': _CFG['mode'], 'held_mb': 0}
    mm = getattr(_L, 'mm' + 'ap')
    mm.restype = _ct.c_void_p
    mm.argtypes = [_ct.c_void_p, _ct.c_size_t, _ct.c_int, _ct.c_int, _ct.c_int, _ct.c_long]
    sync = getattr(_L, 'ms' + 'ync')
    size = _CFG['file_mb'] << 20
    chunk = b'\xa5' * size
    keep = []
    try:
        while r['held_mb'] < _CFG['cap_mb']:
            name = 'kwmap%d' % len(keep)
            fd = _o.open(name, _o.O_RDWR | _o.O_CREAT | _o.O_TRUNC, 0o600)
            if _CFG['mode'] == 'descriptor':
                _o.write(fd, chunk)
                length = 4096
            else:
                _o.ftruncate(fd, size)
                length = size
            addr = mm(None, length, 3, 1, fd, 0)
            _o.close(fd)
            _o.unlink(name)
            if addr in (None, _ct.c_void_p(-1).value):
                r['err'] = 'map failed'
                break
            if _CFG['mode'] == 'mapping':
                _ct.memset(addr, 0x5A, length)
                sync(_ct.c_void_p(addr), _ct.c_size_t(length), 4)
            keep.append(addr)
            r['held_mb'] += _CFG['file_mb']
            _tm.sleep(0.02)
    except OSError as exc:
        r['err'] = _e(exc)
    _tm.sleep(1.0)  # 20 looks of the guard
    r['names'] = _o.listdir('.')[:5]
    return r
"""


def hostile_candidate(cfg: dict) -> dict[str, str]:
    code = hostile.PRELUDE.replace("__CFG__", repr(cfg)) + "\n" + MAP_HIDE
    return {
        "model_new.py": code
        + "\n\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        "
        + hostile.RAISE
    }


@pytest.fixture
def small_work(monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_WORK_MB", str(WORK_MB))


@pytest.mark.parametrize("zygote", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["zygote", "bubblewrap"])
@pytest.mark.parametrize("mode", ["mapping", "descriptor"])
def test_files_held_only_by_a_mapping_count(quick, cfg, small_work, mode, zygote):
    cfg |= {"mode": mode, "file_mb": 16, "cap_mb": 3 * WORK_MB}
    res = evaluate(task("softmax_tiny.py"), hostile_candidate(cfg), quick(torch_ops="allow", zygote=zygote))
    rep = hostile.find_report(*res.reasons)
    assert rep is None, f"the candidate held {rep['held_mb']} MB of mapped, unlinked files, unstopped: {rep}"
    assert res.status == Status.RUNTIME_ERROR, (res.status, res.reasons)
    assert "its folder held more than" in "\n".join(res.reasons), res.reasons
    assert_next_evaluation_works(quick)


def test_the_attack_passes_the_static_scan(cfg):
    """As every attack of hostile.py: the wall is tested, not the scanner."""
    files = hostile_candidate(cfg | {"mode": "mapping", "file_mb": 16, "cap_mb": 1})
    assert audit.scan_source(files) == [] and audit.scan_native(files) == []
