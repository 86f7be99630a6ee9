"""Subprocesses that tests start and always stop: each in its own session (process group)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from webapp.ports import free_port as free_port  # the tests' one, re-exported

ROOT = Path(__file__).resolve().parents[2]


def wait_for(condition: Callable[[], object], timeout: float, interval: float = 0.2, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = condition()
            if result:
                return result
        except Exception as exc:  # keep polling; report the last error on timeout
            last_error = exc
        time.sleep(interval)
    raise TimeoutError(
        f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_error})" if last_error else "")
    )


@dataclass
class ManagedProcess:
    name: str
    proc: subprocess.Popen
    log_path: Path

    @classmethod
    def start(cls, name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> ManagedProcess:
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return cls(name, proc, log_path)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM to the whole group, SIGKILL to whatever is left after `timeout`."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            # The leader exited; make sure no member of its group outlives it.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break
        return self.proc.poll()


def group_members(pgid: int) -> list[int]:
    """Pids whose process group is `pgid` (from /proc): what a clean stop must leave empty."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members
