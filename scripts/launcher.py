"""Start (and stop) the whole Kernelwright stack on one machine: `./kw run`, and `./kw test`.

`run`: Redis (a private redis-server under var/ when REDIS_URL is unset), migrations, daphne, and
one Celery worker per queue (on the gpu queue one per visible GPU, pinned with
CUDA_VISIBLE_DEVICES; on a host without a GPU one worker on the cpu backend). Every child runs in
its own process group, so Ctrl-C or SIGTERM stops each group, grandchildren included (Celery's
pool processes), and nothing is left behind.

`test`: the same Redis logic (an existing one on 127.0.0.1:6379 is fine for tests), then pytest on
the whole tests/ tree with the given arguments; its exit code is ours.

Standard library only (and sandbox.placement, itself standard library only): it runs before
anything is known about the environment.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("KERNELWRIGHT_VAR_DIR", ROOT / "var"))
PY = sys.executable
QUEUES = ("agent", "compile", "gpu")

REDIS_MISSING = """\
No redis-server found, and REDIS_URL is not set.
Install Redis, then run this again:
    sudo apt-get install redis-server      # Debian, Ubuntu
    sudo dnf install redis                 # Fedora
    brew install redis                     # macOS
or point Kernelwright at a running one:  REDIS_URL=redis://HOST:6379/0 ./kw run"""


def say(msg: str) -> None:
    print(f"[kw] {msg}", flush=True)


def free_port(host: str = "127.0.0.1", preferred: int | None = None) -> int:
    for port in ([preferred] if preferred else []) + [0]:
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port")


def redis_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


try:  # loaded here, not in the forked child: a child of a threaded parent should do as little as possible
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def _die_with_parent() -> None:
    """In the child before exec: a new process group, and SIGTERM if the launcher itself dies."""
    os.setpgrp()
    if _LIBC is not None and sys.platform.startswith("linux"):
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    pump: threading.Thread | None = None


@dataclass
class Stack:
    """The children we started, stopped in reverse order of start, each as a whole process group."""

    children: list[Child] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: dict[str, str], prefix_output: bool = True) -> Child:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if prefix_output else None,
            stderr=subprocess.STDOUT if prefix_output else None,
            preexec_fn=_die_with_parent,
        )
        child = Child(name, proc)
        if prefix_output:
            child.pump = threading.Thread(target=self._pump, args=(name, proc), daemon=True)
            child.pump.start()
        self.children.append(child)
        return child

    @staticmethod
    def _pump(name: str, proc: subprocess.Popen) -> None:
        for raw in iter(proc.stdout.readline, b""):
            sys.stdout.write(f"{name:>9} | {raw.decode(errors='replace')}")
            sys.stdout.flush()

    def first_exited(self) -> Child | None:
        return next((c for c in self.children if c.proc.poll() is not None), None)

    def stop(self, timeout: float = 20.0) -> None:
        for child in reversed(self.children):
            _signal_group(child.proc, signal.SIGTERM)
            deadline = time.monotonic() + (timeout if child.name.startswith(("agent", "compile", "gpu")) else 10)
            while child.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if child.proc.poll() is None:
                say(f"{child.name} did not stop in time: killing it")
            # Kill what is left of the group (a pool process that outlived its parent, say).
            _signal_group(child.proc, signal.SIGKILL)
            child.proc.wait()
        for child in self.children:
            if child.pump:
                child.pump.join(timeout=2)
        self.children.clear()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def start_private_redis(stack: Stack) -> str:
    server = shutil.which("redis-server")
    if server is None:
        print(REDIS_MISSING, file=sys.stderr)
        raise SystemExit(2)
    data = VAR / "redis"
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    stack.start("redis", [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
                          "--save", "60 1", "--appendonly", "no", "--daemonize", "no",
                          "--logfile", str(data / "redis.log")], os.environ.copy())
    deadline = time.monotonic() + 15
    while not redis_answers("127.0.0.1", port):
        if stack.first_exited() or time.monotonic() > deadline:
            raise SystemExit(f"redis-server did not start: see {data / 'redis.log'}")
        time.sleep(0.1)
    say(f"started redis-server on 127.0.0.1:{port} (data in {data})")
    return f"redis://127.0.0.1:{port}/0"


def gpu_ids(requested: int | None, backend: str) -> list[str]:
    """GPU ids to pin one gpu worker each to; [] means one worker on the cpu backend."""
    if backend == "cpu":
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    probe = subprocess.run([PY, "-c", "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"],
                           capture_output=True, text=True)
    count = int(probe.stdout.strip() or 0) if probe.returncode == 0 else 0
    ids = [v.strip() for v in visible.split(",") if v.strip()][:count] if visible else [str(i) for i in range(count)]
    return ids[:requested] if requested is not None else ids


def place_timing(ids: list[str]):
    """Give each GPU a CPU of its own for timed loops (sandbox.placement) and move this process,
    so every process it starts, to the other CPUs. None (and nothing moved) on a host with too
    few CPUs."""
    from sandbox.placement import timing_plan

    plan = timing_plan(ids)
    if plan is None:
        say("too few CPUs to give each GPU a timing CPU of its own: timed loops are not pinned")
        return None
    os.sched_setaffinity(0, plan.others)
    say(plan.describe())
    return plan


def worker_argv(queue: str, name: str, concurrency: int) -> list[str]:
    return [PY, "-m", "celery", "-A", "webapp.celery:app", "worker", "-Q", queue, "-n", f"{name}@%h",
            "-c", str(concurrency), "--loglevel", "INFO", "--without-gossip", "--without-mingle"]


def wait_healthy(url: str, stack: Stack, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stack.first_exited():
            return False
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=10) as resp:
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    return False


class Stop(Exception):
    pass


def _raise_stop(signum: int, frame: object) -> None:
    raise Stop(signal.Signals(signum).name)


def run(args: argparse.Namespace) -> int:
    stack = Stack()
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    env = os.environ.copy()
    env.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    env["PYTHONUNBUFFERED"] = "1"
    try:
        backend = env.get("KERNELWRIGHT_BACKEND", "auto")
        ids = gpu_ids(args.gpu_workers, backend)
        plan = place_timing(ids) if ids and args.timing_cpus else None
        if not env.get("REDIS_URL"):
            env["REDIS_URL"] = start_private_redis(stack)
        else:
            say(f"using REDIS_URL={env['REDIS_URL']}")
        say("migrating the database")
        subprocess.run([PY, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True)
        # The gallery's case studies ship as trajectory fixtures; loading is idempotent.
        subprocess.run([PY, "manage.py", "load_gallery"], cwd=ROOT, env=env, check=True)

        port = free_port(args.host, args.port)
        if port != args.port:
            say(f"port {args.port} is busy: using {port}")
        stack.start("web", [PY, "-m", "daphne", "-b", args.host, "-p", str(port), "webapp.asgi:application"], env)
        stack.start("agent", worker_argv("agent", "agent", args.agent_concurrency), env)
        stack.start("compile", worker_argv("compile", "compile", args.compile_concurrency), env)
        if ids:
            for i, gpu in enumerate(ids):
                genv = env | {"CUDA_VISIBLE_DEVICES": gpu, "KERNELWRIGHT_BACKEND": "cuda"}
                if plan is not None:
                    genv["KERNELWRIGHT_TIMING_CPU"] = str(plan.timing_cpu[gpu])
                stack.start(f"gpu{i}", worker_argv("gpu", f"gpu{i}", max(1, args.evals_per_gpu)), genv)
        else:
            count = max(1, args.gpu_workers or 1)
            say(f"no GPU visible: {count} gpu-queue worker(s) on the cpu backend")
            if count > 1:
                # docs/gpu-pool.md: CPU timings taken in parallel share cores and caches, so each
                # worker's numbers are disturbed by the others (measured: 7.8 ms alone, 15.7 ms with two).
                say("warning: several cpu-backend evaluation workers time on the same cores; "
                    "their speedups disturb each other. Use one unless this host has many cores.")
            for i in range(count):
                stack.start(f"gpu{i}", worker_argv("gpu", f"gpu{i}", 1), env | {"KERNELWRIGHT_BACKEND": "cpu"})

        url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{port}"
        say(f"Kernelwright is starting at {url}/  (health: {url}/health/)")
        if wait_healthy(url, stack, args.ready_timeout):
            say(f"Kernelwright is up at {url}/  - every part healthy. Ctrl-C stops everything.")
        elif not stack.first_exited():
            say(f"{url}/healthz is not green yet: see {url}/health/")
        while True:
            dead = stack.first_exited()
            if dead:
                say(f"{dead.name} exited with code {dead.proc.returncode}: stopping everything")
                return 1
            time.sleep(0.5)
    except Stop as stop:
        say(f"{stop}: stopping")
        return 0
    except subprocess.CalledProcessError as exc:
        say(f"failed: {exc}")
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stack.stop()
        say("all processes stopped")


def test(pytest_args: list[str]) -> int:
    """Run pytest on the whole tests/ tree with a Redis: REDIS_URL, else 127.0.0.1:6379, else our own."""
    stack = Stack()
    env = os.environ.copy()
    signal.signal(signal.SIGTERM, _raise_stop)
    try:
        if not env.get("REDIS_URL"):
            if redis_answers("127.0.0.1", 6379):
                env["REDIS_URL"] = "redis://127.0.0.1:6379/0"
            else:
                env["REDIS_URL"] = start_private_redis(stack)
        proc = subprocess.Popen([PY, "-m", "pytest", *pytest_args], cwd=ROOT, env=env)
        # pytest shares our process group: Ctrl-C reaches it directly; we wait for it to finish.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return proc.wait()
        except Stop:
            proc.terminate()
            return proc.wait()
    except Stop:
        return 143
    finally:
        stack.stop()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "test":
        return test(argv[1:])
    parser = argparse.ArgumentParser(prog="kw", description="Run Kernelwright on this machine.")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="start Redis (if needed), the web server and the workers")
    r.add_argument("--host", default=os.environ.get("KERNELWRIGHT_HOST", "127.0.0.1"))
    r.add_argument("--port", type=int, default=int(os.environ.get("KERNELWRIGHT_PORT", "8000")))
    r.add_argument("--gpu-workers", type=int, default=None, help="gpu-queue workers (default: one per visible GPU, or 1 on the cpu backend)")
    r.add_argument("--evals-per-gpu", type=int, default=2,
                   help="evaluations at once on each GPU (cuda only): timed loops still take the GPU alone "
                        "(sandbox device lock); 2 measured 1.5-1.6x the evaluations per minute of 1, medians "
                        "within 1.6%% (docs/gpu-pool.md)")
    r.add_argument("--timing-cpus", action="store_true",
                   help="give each GPU a CPU of its own for timed loops and keep every other process off it "
                        "(sandbox.placement; no measured effect on the two-H200 host, docs/gpu-pool.md)")
    r.add_argument("--agent-concurrency", type=int, default=2)
    r.add_argument("--compile-concurrency", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    r.add_argument("--ready-timeout", type=float, default=90.0)
    sub.add_parser("test", help="run the test suite (extra arguments go to pytest)")
    args = parser.parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
