"""The one-command launcher: everything comes up green, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.processes import ROOT, free_port, wait_for

pytestmark = pytest.mark.slow


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, stack = set(), [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def healthz(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_run_brings_every_part_up_and_ctrl_c_stops_every_process(tmp_path, redis_url) -> None:
    port = free_port()
    env = os.environ | {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'app.sqlite3'}",
        "KERNELWRIGHT_VAR_DIR": str(tmp_path / "var"),
        "KERNELWRIGHT_BACKEND": "cpu",
    }
    if shutil.which("redis-server"):
        env.pop("REDIS_URL", None)  # the launcher starts a redis-server of its own under var/
    log = open(tmp_path / "launcher.log", "wb")
    launcher = subprocess.Popen(
        [
            sys.executable,
            "scripts/launcher.py",
            "run",
            "--port",
            str(port),
            "--agent-concurrency",
            "1",
            "--compile-concurrency",
            "1",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        status, report = wait_for(
            lambda: (s := healthz(url))[0] == 200 and s, timeout=150, interval=1, what="a green /healthz"
        )
        assert report["ok"] and all(p["ok"] for p in report["parts"].values()), report
        if "REDIS_URL" not in env:
            assert (tmp_path / "var" / "redis").is_dir()
        started = descendants(launcher.pid)
        assert len(started) >= 6  # redis, daphne, three workers and their pool processes

        os.killpg(launcher.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        assert launcher.wait(timeout=60) == 0
        deadline = time.monotonic() + 5
        while any(alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p for p in started if alive(p)] == []
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        log.close()
        output = (tmp_path / "launcher.log").read_text(errors="replace")
        print(output[-3000:])
    assert "all processes stopped" in output


def test_run_without_redis_says_exactly_what_to_install(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {
        "PATH": str(tmp_path),  # no redis-server on it
        "KERNELWRIGHT_VAR_DIR": str(tmp_path / "var"),
    }
    proc = subprocess.run(
        [sys.executable, "scripts/launcher.py", "run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "apt-get install redis-server" in proc.stderr
    assert "REDIS_URL=redis://" in proc.stderr
