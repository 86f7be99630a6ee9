"""`./kw run --port N` listens on N or not at all (issue 20): a busy port is an error that says
why and who holds it, with a non-zero exit and nothing started; with --wait-for-port it waits
for the port instead. Never another port: open pages reconnect to the address they know."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.support.processes import ROOT, free_port, wait_for


def launcher_env(tmp_path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'app.sqlite3'}",
        "KERNELWRIGHT_VAR_DIR": str(tmp_path / "var"),
        "KERNELWRIGHT_BACKEND": "cpu",
    }


def stop_launcher(proc: subprocess.Popen) -> None:
    """Ctrl-C to the launcher's group, as in a terminal; SIGKILL if it does not stop in a minute."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def hold(port: int) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen(1)
    return s


def test_a_busy_port_is_an_error_that_says_why_and_nothing_starts(tmp_path) -> None:
    port = free_port()
    with hold(port):
        proc = subprocess.run(
            [sys.executable, "scripts/launcher.py", "run", "--port", str(port)],
            cwd=ROOT,
            env=launcher_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert f"cannot listen on 127.0.0.1:{port}: address already in use by pid {os.getpid()}" in out
    assert "--port N" in out and "does not move to another port" in out
    # Nothing else was started: no Redis, no migration, no other port.
    assert "redis-server" not in out and "migrating" not in out and "using" not in out
    assert not (tmp_path / "var" / "redis").exists()


@pytest.mark.slow
def test_with_wait_for_port_it_waits_then_listens_on_that_very_port(tmp_path) -> None:
    port = free_port()
    holder = hold(port)
    log = tmp_path / "launcher.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "scripts/launcher.py",
                "run",
                "--port",
                str(port),
                "--wait-for-port",
                "60",
                "--web-processes",
                "1",
                "--agent-concurrency",
                "1",
                "--compile-concurrency",
                "1",
            ],
            cwd=ROOT,
            env=launcher_env(tmp_path),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: f"port {port} on 127.0.0.1 is busy" in log.read_text(), 60, what="the waiting message")
        time.sleep(1)
        assert proc.poll() is None and "redis-server" not in log.read_text()
        holder.close()
        # Now the launcher's: it comes up on the port asked for and serves there.
        import urllib.error
        import urllib.request

        def serves() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                    return resp.status == 200
            except urllib.error.HTTPError as err:
                return err.code == 503  # up, some part not green yet: still the web server, on that port

        wait_for(serves, 150, interval=1, what=f"the web server on port {port}")
        assert "is busy: using" not in log.read_text()
    finally:
        holder.close()
        stop_launcher(proc)
        print(log.read_text(errors="replace")[-3000:])
