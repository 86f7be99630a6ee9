"""The candidate runs in a killable, resource-limited child: crashes and abuse become results,
secrets and the network are out of reach, and the next evaluation still works."""

from __future__ import annotations

import os
import time

import pytest

from sandbox import evaluate
from sandbox.isolation import Cgroup, cgroup_root, netns_available, scrubbed_env, uid_drop_available
from sandbox.schema import Status
from tests.sandbox.helpers import candidate, task

HEAD = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"


def body(*lines: str) -> dict[str, str]:
    return {"model_new.py": HEAD + "".join(f"        {line}\n" for line in lines)}


def assert_next_evaluation_works(quick) -> None:
    res = evaluate(task("softmax_tiny.py"), candidate("softmax_cpp"), quick())
    assert res.status == Status.OK, res.reasons


def test_segfault_is_a_runtime_error(quick):
    res = evaluate(
        task("softmax_tiny.py"),
        body("import faulthandler", "faulthandler._sigsegv()", "return x"),
        quick(torch_ops="allow"),
    )
    assert res.status == Status.RUNTIME_ERROR
    assert "SIGSEGV" in res.reasons[0]
    assert_next_evaluation_works(quick)


def test_os_exit_is_a_runtime_error(quick):
    res = evaluate(
        task("softmax_tiny.py"),
        body("vars(getattr(torch, 's' + 'ys'))['modules']['o' + 's']._exit(3)"),
        quick(torch_ops="allow"),
    )
    assert res.status == Status.RUNTIME_ERROR
    assert "exited with code 3" in res.reasons[0]


def test_infinite_loop_is_a_timeout(quick):
    started = time.monotonic()
    res = evaluate(
        task("softmax_tiny.py"), body("while True:", "    pass"), quick(torch_ops="allow", eval_timeout_s=10)
    )
    assert res.status == Status.TIMEOUT
    assert "did not finish" in res.reasons[0]
    assert time.monotonic() - started < 60
    assert_next_evaluation_works(quick)


def test_reference_hang_is_reported_as_the_task(quick):
    src = task("softmax_tiny.py").replace("return torch.softmax(x, dim=1)", "while True:\n            pass")
    res = evaluate(src, candidate("softmax_cpp"), quick(eval_timeout_s=10))
    assert res.status == Status.TIMEOUT and "reference" in res.reasons[0]


def test_huge_print_is_cut_off(quick):
    res = evaluate(
        task("softmax_tiny.py"),
        body(
            "import sys",
            "chunk = 'x' * (1 << 20)",
            "for _ in range(10 * 1024):",
            "    sys.stdout.write(chunk)",
            "return x",
        ),
        quick(torch_ops="allow", output_limit_mb=8),
    )
    assert res.status == Status.RUNTIME_ERROR
    assert "SIGXFSZ" in res.reasons[0] and "8 MB" in res.reasons[0]
    assert_next_evaluation_works(quick)


@pytest.mark.skipif(
    not (uid_drop_available() or cgroup_root() is not None or os.geteuid() != 0),
    reason="no enforceable process limit on this host (root without cgroups or uid drop)",
)
def test_fork_bomb_is_contained(quick):
    bomb = body(
        "clone = vars(getattr(torch, 's' + 'ys'))['modules']['o' + 's'].fork",
        "while True:",
        "    try:",
        "        clone()",
        "    except OSError:",
        "        pass",
    )
    res = evaluate(task("softmax_tiny.py"), bomb, quick(torch_ops="allow", eval_timeout_s=15, max_processes=64))
    assert res.status in (Status.TIMEOUT, Status.RUNTIME_ERROR), res.reasons
    root = cgroup_root()
    if root is not None:
        time.sleep(0.5)
        mine = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(f"c{os.getpid()}-")]
        leftovers = [p for p in mine if (p / "cgroup.procs").read_text().strip()]
        assert not leftovers
    assert_next_evaluation_works(quick)


def test_secrets_are_not_in_the_child_environment(quick, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://u:p@h/db")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "t")
    monkeypatch.setenv("DJANGO_SECRET_KEY", "k")
    res = evaluate(
        task("softmax_tiny.py"),
        body("import os", "raise RuntimeError('ENV=' + ','.join(sorted(os.environ)))"),
        quick(torch_ops="allow"),
    )
    assert res.status == Status.RUNTIME_ERROR
    env_line = res.reasons[0]
    assert "ENV=" in env_line and "PATH" in env_line
    for name in ("OPENAI_API_KEY", "DATABASE_URL", "REDIS_URL", "MY_SERVICE_TOKEN", "DJANGO_SECRET_KEY"):
        assert name not in env_line


def test_scrubbed_env_drops_secret_patterns(monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a")
    env = scrubbed_env()
    assert "LD_LIBRARY_PATH" in env and "AWS_SECRET_ACCESS_KEY" not in env


@pytest.mark.skipif(not netns_available(), reason="this host does not allow a network namespace")
def test_network_is_unreachable(quick):
    res = evaluate(
        task("softmax_tiny.py"),
        body(
            "import socket",
            "s = socket.create_connection(('127.0.0.1', 6379), timeout=2)",
            "raise RuntimeError('CONNECTED')",
        ),
        quick(torch_ops="allow"),
    )
    assert res.status == Status.RUNTIME_ERROR
    assert "CONNECTED" not in res.reasons[0]
    assert "unreachable" in res.reasons[0].lower() or "refused" not in res.reasons[0].lower()
    assert any("no network" in f for f in res.audit.findings)


def test_candidate_cannot_read_the_reference_child(quick):
    """Expected outputs live in the reference child and the parent; the candidate only sees its
    own folder. It cannot find the reference's folder (private, random name)."""
    res = evaluate(
        task("softmax_tiny.py"),
        body("import glob", "raise RuntimeError('FOUND=' + repr(glob.glob('/tmp/kw-reference-*/task.py')))"),
        quick(torch_ops="allow"),
    )
    if uid_drop_available():
        assert "FOUND=[]" in res.reasons[0]
    else:
        assert "FOUND=" in res.reasons[0]  # same uid: documented limitation, secrets are never on disk anyway


def test_cgroup_is_removed_after_use():
    if cgroup_root() is None:
        pytest.skip("no pids cgroup on this host")
    cg = Cgroup(16)
    assert cg.path is not None and cg.path.exists()
    cg.remove()
    assert not cg.path.exists()


def test_a_paused_child_runs_nothing_not_even_its_own_threads(quick):
    """Child.pause: while the baselines are timed the candidate is stopped, threads and
    children included (a native thread launching kernels could otherwise slow the baseline it
    is compared with). Here a candidate's import starts a thread that stamps a file every 10 ms;
    a one-second pause leaves a one-second hole in the stamps."""
    from sandbox.isolation import Child
    from sandbox.protocol import _child_env, _limits, _opts_msg

    opts = quick()
    child = Child("candidate", _limits(opts, "cpu"), opts, _child_env(opts, "cpu"))
    try:
        child.write_files(
            {
                "model_new.py": (
                    "import threading, time\n"
                    "def stamp():\n"
                    "    while True:\n"
                    "        with open('stamps.txt', 'a') as f:\n"
                    "            f.write(f'{time.time()}\\n')\n"
                    "        time.sleep(0.01)\n"
                    "threading.Thread(target=stamp, daemon=True).start()\n"
                    "import torch.nn as nn\n"
                    "class ModelNew(nn.Module):\n"
                    "    pass\n"
                )
            }
        )
        child.send(
            {"options": _opts_msg(opts), "backend": "cpu", "library": None, "inline_manifest": [], "inline_dir": None}
        )
        stamps = child.workdir / "stamps.txt"  # the child's cwd
        deadline = time.time() + 60
        while not (stamps.exists() and len(stamps.read_text().split()) > 5) and time.time() < deadline:
            time.sleep(0.05)
        child.pause(True)
        time.sleep(0.2)  # a stamp already being written lands now
        paused_at = time.time()
        time.sleep(1.0)
        resumed_at = time.time()
        child.pause(False)
        time.sleep(0.3)
        times = [float(x) for x in stamps.read_text().split()]
        assert not [t for t in times if paused_at < t < resumed_at], "the child kept running while paused"
        assert any(t > resumed_at for t in times), "the child did not continue after the pause"
    finally:
        child.close()
