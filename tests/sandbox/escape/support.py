"""The test side of the escape tests: options, a loopback listener the hostile code calls,
an evaluator in a subprocess of its own (with secrets in its environment, in a PID namespace
that a kill(-1) cannot leave), the scan for processes that outlived an evaluation."""

from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

from sandbox import EvalOptions
from sandbox.schema import EvalResult
from tests.sandbox.helpers import candidate, task

from . import hostile

REPO = Path(__file__).resolve().parents[3]
QUICK = dict(
    backend="cpu",
    compile_baseline=False,
    timing_budget_s=0.05,
    min_timed_calls=20,
    warmup_calls=2,
    eval_timeout_s=120,
    torch_ops="allow",
)
SECRET_NAMES = ("KW_TEST_SECRET_TOKEN", "OPENAI_API_KEY", "REDIS_URL")
SIDES = ("candidate", "reference")
CONTAINMENT_SWITCHES = ("KERNELWRIGHT_UNCONTAINED", "KERNELWRIGHT_BWRAP")


def quick_options(cache_dir: str, **overrides) -> EvalOptions:
    return EvalOptions(**(QUICK | {"cache_dir": cache_dir} | overrides))


def redis_port() -> int:
    return urlparse(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0").port or 6379


def redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def host_pidns() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


class Listener:
    """A TCP port on 127.0.0.1 and a unix socket under the host's /tmp that nothing inside a
    sandbox may reach; `arrivals()` says who called."""

    def __init__(self) -> None:
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(64)
        self.port = self.tcp.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="kw-escape-sock-")
        os.chmod(self.dir, 0o755)
        self.unix_path = os.path.join(self.dir, "s")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.unix_path)
        os.chmod(self.unix_path, 0o777)
        self.unix.listen(64)

    def arrivals(self, wait: float = 0.5) -> list[str]:
        got, end = [], time.monotonic() + wait
        while True:
            ready = select.select([self.tcp, self.unix], [], [], max(0.0, end - time.monotonic()))[0]
            if not ready:
                return got
            for sock in ready:
                conn, _ = sock.accept()
                conn.settimeout(1)
                try:
                    data = conn.recv(200)
                except OSError:
                    data = b""
                conn.close()
                got.append(("tcp " if sock is self.tcp else "unix ") + data.decode(errors="replace").strip())

    def close(self) -> None:
        self.tcp.close()
        self.unix.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def base_cfg(token: str, listener: Listener) -> dict:
    return {
        "token": token,
        "port": listener.port,
        "unix": listener.unix_path,
        "redis_port": redis_port(),
        "host_pidns": host_pidns(),
    }


def hostile_pair(side: str, attack: str, cfg: dict) -> tuple[str, dict[str, str]]:
    """(task source, candidate files) with the attack on `side` and the other side honest."""
    if side == "candidate":
        return task("softmax_tiny.py"), hostile.candidate(attack, cfg)
    return hostile.task(attack, cfg), candidate("softmax_cpp")


def texts_of(res: EvalResult) -> list[str]:
    return list(res.reasons) + [json.dumps(res.to_dict())]


def report_of(res: EvalResult) -> dict:
    rep = hostile.find_report(*res.reasons)
    assert rep is not None, f"the hostile code sent no report (did it run?): {res.status} {res.reasons}"
    return rep


def processes_named(name: str) -> list[int]:
    """Live host processes whose name (prctl PR_SET_NAME) is `name`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                zombie = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
                if Path(f"/proc/{entry}/comm").read_text().strip() == name and not zombie:
                    found.append(int(entry))
            except (OSError, IndexError):
                pass
    return found


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# ---- an evaluator of its own -------------------------------------------------------------

_INIT = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"


def shield() -> list[str] | None:
    """A PID namespace (and /proc) for the evaluator subprocess, so that what a hostile child does
    to every process it can see stays there even when containment does not hold. None if this host
    cannot make one."""
    if not shutil.which("unshare"):
        return None
    if os.geteuid() == 0:
        argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    else:
        argv = [
            "unshare",
            f"--map-user={os.geteuid()}",
            f"--map-group={os.getegid()}",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
        ]
    try:
        ok = subprocess.run(argv + ["true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return argv if ok else None


def secret_env() -> tuple[str, dict[str, str]]:
    """A fresh secret and the variables that carry it (a worker's environment)."""
    value = "kwsecret" + secrets.token_hex(12)
    return value, {
        "KW_TEST_SECRET_TOKEN": value,
        "OPENAI_API_KEY": "sk-" + value,
        "REDIS_URL": f"redis://:{value}@127.0.0.1:{redis_port()}/0",
    }


def run_evaluator(
    spec: dict, env_extra: dict[str, str] | None = None, *, timeout: float = 300, need_shield: bool = True
) -> dict:
    """Run tests.sandbox.escape.runner on `spec` in a subprocess started with `env_extra` in its
    environment (exec-time environment: what /proc/PID/environ shows) and inside `shield()`.
    Returns the runner's output plus `rc`, `wall_s` and `log`; `finished` is False when the
    evaluator itself was killed or hung."""
    import pytest

    argv = shield()
    if argv is None:
        if need_shield:
            pytest.skip("no PID namespace for the evaluator on this host (unshare): a kill(-1) test would hit the host")
        argv = []
    work = Path(tempfile.mkdtemp(prefix="kw-escape-run-"))
    os.chmod(work, 0o755)
    try:
        (work / "spec.json").write_text(json.dumps(spec))
        env = {k: v for k, v in os.environ.items() if k not in CONTAINMENT_SWITCHES}
        env.update({"PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}, **(env_extra or {}))
        cmd = argv + [
            sys.executable,
            "-S",
            "-c",
            _INIT,
            sys.executable,
            "-m",
            "tests.sandbox.escape.runner",
            str(work / "spec.json"),
            str(work / "out.json"),
        ]
        started = time.monotonic()
        with open(work / "log", "wb") as log:
            proc = subprocess.Popen(
                cmd,
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
        out = json.loads((work / "out.json").read_text()) if (work / "out.json").exists() else {}
        out.update(rc=rc, wall_s=time.monotonic() - started, log=(work / "log").read_text(errors="replace")[-3000:])
        out.setdefault("finished", False)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def evaluator_spec(task_source: str, files: dict[str, str], cache_dir: str, **options) -> dict:
    return {"mode": "evaluate", "task": task_source, "files": files, "cache_dir": cache_dir, "options": options}


def analysis_spec(task_source: str) -> dict:
    return {"mode": "analyze", "task": task_source}


def evaluate_hostile(quick, side: str, attack: str, cfg: dict) -> tuple[EvalResult, dict]:
    """Evaluate, in this process, with the attack on `side`; the result and the attack's report."""
    from sandbox import evaluate

    src, files = hostile_pair(side, attack, cfg)
    res = evaluate(src, files, quick(torch_ops="allow"))
    return res, report_of(res)


def analysis_report(analysis) -> dict:
    """The hostile task's report: it raises it at import, and the analysis keeps the message's
    first 300 characters in its one-line error and the whole of it in the traceback."""
    rep = hostile.find_report(analysis.error, analysis.data.get("traceback", ""))
    assert rep is not None, f"the hostile task sent no report (did it run?): {analysis.ok} {analysis.error[:2000]}"
    return rep


def assert_next_analysis_works() -> None:
    from agent.builtin.graph import analyze_source

    a = analyze_source(task("softmax_tiny.py"), device="cpu", profile=False, timeout=120)
    assert a.ok, a.error


def outcome(out: dict) -> dict:
    """The hostile run's result (EvalResult.to_dict() or the Analysis) from run_evaluator,
    failing if the evaluating process raised, died or hung instead."""
    assert "raised" not in out or "result" in out, (
        f"the evaluating process raised instead of returning:\n{out['raised']}"
    )
    assert "result" in out, (
        f"the evaluating process itself was killed or hung (rc {out['rc']}, {out['wall_s']:.0f} s):\n{out['log']}"
    )
    return out["result"]


def finished(out: dict) -> EvalResult:
    return EvalResult.from_dict(outcome(out))


def honest_after(out: dict) -> None:
    """The honest evaluation (or analysis) that the runner did after the hostile one succeeded."""
    assert out["finished"], f"the evaluating process did not get through the next evaluation (rc {out['rc']}): " + (
        out.get("raised") or out["log"]
    )
    assert out["honest"]["ok"], f"the next evaluation failed: {out['honest']['detail']}"
