"""Start (and stop) the whole Kernelwright stack on one machine: `./kw run`, and `./kw test`.

`run`: first the web server's listening socket on exactly the address asked for (a busy port is
an error that says who holds it, or is waited for with --wait-for-port; never another port), then
Redis (a private redis-server under var/ when REDIS_URL is unset), migrations, the gallery, the
web server processes (webapp.core.server, all accepting on that one socket), and one Celery
worker per queue (on the gpu queue one per visible GPU, pinned with CUDA_VISIBLE_DEVICES; on a
host without a GPU one worker on the cpu backend). Every child runs in its own process group, so
Ctrl-C or SIGTERM stops each group, grandchildren included (Celery's pool processes), and nothing
is left behind.

Faults stay local: any child that dies, the private redis-server included, is started again (its
whole process group killed first), after 1 s, then 2, 5, 10 and at most 30 s while it keeps dying
within a minute of its start; each restart is logged with why the child ended. A restarted web
process listens on the same socket and a restarted redis-server on the same port with the same
password, so pages reconnect and workers carry on.

Secrets (issue 16): the private redis-server listens on 127.0.0.1 only and requires a random
password of this run (in REDIS_URL, never on a command line); each child gets only the secrets
it needs: the model endpoint (OPENAI_API_KEY, OPENAI_BASE_URL) reaches daphne and the agent
worker only, the real SECRET_KEY daphne only, and the compile and gpu workers, which run
untrusted code, get no variable named like a secret (`worker_env`).

`test`: the same Redis logic (an existing one on 127.0.0.1:6379 is fine for tests), then pytest on
the tests/ tree: the fast tier (not `slow`) unless the arguments choose (`tier`); its exit code
is ours.

Standard library only (and sandbox.placement, itself standard library only): it runs before
anything is known about the environment.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import re
import secrets
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
sys.path.insert(0, str(ROOT))  # run as a script: the repository's packages
from webapp.ports import free_port  # noqa: E402

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


class PortUnavailable(Exception):
    pass


def port_holder(port: int) -> str:
    """Who listens on `port` here, from /proc (Linux): "pid 123 (python3 -m daphne ...)", or ""."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return ""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                return f"pid {proc.name} ({argv[:120]})"
        except OSError:
            continue
    return "another program (not ours to see)"


def listen(host: str, port: int, wait_s: float = 0.0) -> socket.socket:
    """The web server's listening socket on exactly host:port, opened here and handed to every web
    process (and to each one restarted), so the address never changes during a run. A port in use
    is waited for up to `wait_s`, then PortUnavailable says why; never another port: open pages
    reconnect to the address they know."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past connections in TIME_WAIT do not count
        try:
            sock.bind((host, port))
            sock.listen(1024)
            sock.set_inheritable(True)
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                holder = port_holder(port)
                why = f"address already in use{f' by {holder}' if holder else ''}"
            elif exc.errno == errno.EACCES:
                why = "permission denied (ports below 1024 need root)"
            else:
                why = exc.strerror or str(exc)
            if time.monotonic() < deadline and exc.errno == errno.EADDRINUSE:
                if not said:
                    say(f"port {port} on {host} is busy ({why}): waiting up to {wait_s:.0f} s for it to be free")
                    said = True
                time.sleep(0.5)
                continue
            raise PortUnavailable(
                f"cannot listen on {host}:{port}: {why}.\n"
                f"Stop what holds it, or choose another port: ./kw run --port N (or KERNELWRIGHT_PORT=N); "
                f"--wait-for-port SECONDS waits for it to be free. Kernelwright does not move to another port."
            ) from exc


def _resp(*words: str) -> bytes:
    """One Redis command in RESP, the protocol's array form (safe for any password)."""
    return f"*{len(words)}\r\n".encode() + b"".join(
        f"${len(w.encode())}\r\n".encode() + w.encode() + b"\r\n" for w in words
    )


def redis_answers(host: str, port: int, timeout: float = 1.0, password: str | None = None) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall((_resp("AUTH", password) if password else b"") + _resp("PING"))
            reply = b""
            while b"\r\n" not in reply or (password and reply.count(b"\r\n") < 2):
                chunk = s.recv(256)
                if not chunk:
                    break
                reply += chunk
            return reply.endswith(b"+PONG\r\n") and (not password or reply.startswith(b"+OK\r\n"))
    except OSError:
        return False


# -- what each child may know -------------------------------------------------------------------
MODEL_SECRETS = ("OPENAI_API_KEY", "OPENAI_BASE_URL")
# Names that look like a credential (AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, HF_TOKEN, ...). libpq's
# own PG* variables stay: every worker needs the database.
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)


def throwaway_secret_key(env: dict[str, str]) -> dict[str, str]:
    """Django wants a SECRET_KEY; a process that signs nothing gets a random one of its own."""
    return env | {"SECRET_KEY": "throwaway-" + secrets.token_urlsafe(32)}


def agent_env(env: dict[str, str]) -> dict[str, str]:
    """The agent worker calls the model: it keeps the endpoint, not the web server's SECRET_KEY."""
    return throwaway_secret_key(env)


def worker_env(env: dict[str, str]) -> dict[str, str]:
    """The compile and gpu workers run untrusted code (inside the sandbox, but a wall is no reason
    to hand it the keys): no model endpoint, no SECRET_KEY of the web server, nothing else named
    like a secret."""
    kept = {
        k: v
        for k, v in env.items()
        if k not in MODEL_SECRETS and (k.upper().startswith("PG") or not SECRET_NAME.search(k))
    }
    return throwaway_secret_key(kept)


def minimal_env(env: dict[str, str]) -> dict[str, str]:
    """For redis-server: a program of its own that needs nothing of ours."""
    return {k: env[k] for k in ("PATH", "HOME", "LANG", "LC_ALL", "TZ") if k in env}


def web_secret_key(env: dict[str, str]) -> str:
    """SECRET_KEY for daphne: the configured one, else a random one kept under var/ (0600), so a
    fresh machine does not sign sessions with the public development key."""
    if env.get("SECRET_KEY"):
        return env["SECRET_KEY"]
    path = VAR / "secret-key"
    if not path.exists():
        VAR.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


try:  # loaded here, not in the forked child: a child of a threaded parent should do as little as possible
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def _die_with_parent() -> None:
    """In the child before exec: a new process group, and SIGTERM if the launcher itself dies."""
    os.setpgrp()
    if _LIBC is not None and sys.platform.startswith("linux"):
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


BACKOFF_S = (1, 2, 5, 10, 30)  # before restart 1, 2, ... of a child that keeps dying
STABLE_S = 60.0  # a child that ran this long before it died starts the backoff afresh


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    prefix_output: bool
    restart: bool  # start it again when it dies (else its death stops everything)
    pass_fds: tuple[int, ...] = ()  # inherited descriptors (the web server's listening socket)
    prepare: object = None  # called before each start (the private redis-server's config file)
    ready: object = None  # called after each start, until it answers (then the config is removed)
    proc: subprocess.Popen | None = None
    pump: threading.Thread | None = None
    started: float = 0.0
    quick_deaths: int = 0  # deaths in a row, each within STABLE_S of its start
    restarts: int = 0
    restart_at: float | None = None  # dead, and due to start again then (monotonic)


@dataclass
class Stack:
    """The children we started, stopped in reverse order of start, each as a whole process group."""

    children: list[Child] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        prefix_output: bool = True,
        restart: bool = False,
        **hooks,
    ) -> Child:
        child = Child(name, argv, env, prefix_output, restart, **hooks)
        self.children.append(child)
        self._spawn(child)
        return child

    def _spawn(self, child: Child) -> None:
        if child.prepare:
            child.prepare()
        child.proc = subprocess.Popen(
            child.argv,
            cwd=ROOT,
            env=child.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if child.prefix_output else None,
            stderr=subprocess.STDOUT if child.prefix_output else None,
            preexec_fn=_die_with_parent,
            pass_fds=child.pass_fds,
        )
        child.started, child.restart_at = time.monotonic(), None
        if child.prefix_output:
            child.pump = threading.Thread(target=self._pump, args=(child.name, child.proc), daemon=True)
            child.pump.start()
        if child.ready:
            child.ready(child)

    def supervise(self) -> Child | None:
        """Restart dead children that may be restarted, each after its backoff; the first dead
        child that may not be (the private redis-server) is returned, and the caller stops."""
        now = time.monotonic()
        for child in self.children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.restarts += 1
                    say(f"restarting {child.name} (restart {child.restarts})")
                    self._spawn(child)
                continue
            code = child.proc.poll()
            if code is None:
                continue
            if not child.restart:
                return child
            # Whatever the dead leader left in its group (a pool process) goes with it.
            _signal_group(child.proc, signal.SIGKILL)
            ran = now - child.started
            child.quick_deaths = child.quick_deaths + 1 if ran < STABLE_S else 1
            delay = BACKOFF_S[min(child.quick_deaths, len(BACKOFF_S)) - 1]
            child.restart_at = now + delay
            say(
                f"{child.name} {describe_exit(code)} after {ran:.0f} s: starting it again in {delay} s"
                + (f" ({child.quick_deaths} quick deaths in a row)" if child.quick_deaths > 1 else "")
            )
        return None

    def first_exited(self) -> Child | None:
        return next((c for c in self.children if c.restart_at is None and c.proc.poll() is not None), None)

    @staticmethod
    def _pump(name: str, proc: subprocess.Popen) -> None:
        for raw in iter(proc.stdout.readline, b""):
            sys.stdout.write(f"{name:>9} | {raw.decode(errors='replace')}")
            sys.stdout.flush()

    def stop(self, timeout: float = 20.0) -> None:
        for child in reversed(self.children):
            if child.restart_at is not None:
                continue  # dead, its group already killed, waiting for a restart that will not come
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
    """A redis-server of this run: loopback only, a random password (given in a 0600 config file
    that is removed once the server has read it, so it is on no command line and no disk).

    It is restarted like the other children when it dies, on the same port with the same
    password, so every child's REDIS_URL stays right; its data (queued tasks, results) is kept
    in an append-only file synced every second, so a restart loses at most a second of writes,
    and what the database holds (jobs, turns) does not depend on it."""
    server = shutil.which("redis-server")
    if server is None:
        print(REDIS_MISSING, file=sys.stderr)
        raise SystemExit(2)
    data = VAR / "redis"
    data.mkdir(parents=True, exist_ok=True)
    data.chmod(0o700)
    port, password = free_port(), secrets.token_hex(24)
    conf = data / "redis.conf"

    def write_conf() -> None:
        conf.unlink(missing_ok=True)
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(
                f"port {port}\nbind 127.0.0.1\nprotected-mode yes\nrequirepass {password}\n"
                f'dir "{data}"\nsave "60 1"\nappendonly yes\nappendfsync everysec\ndaemonize no\n'
                f'logfile "{data / "redis.log"}"\n'
            )

    def wait_answers(child: Child) -> None:
        try:
            deadline = time.monotonic() + 15
            while not redis_answers("127.0.0.1", port, password=password):
                if child.proc.poll() is not None or time.monotonic() > deadline:
                    return  # the caller (or the supervisor) sees it dead
                time.sleep(0.1)
        finally:
            conf.unlink(missing_ok=True)

    child = stack.start(
        "redis",
        [server, str(conf)],
        minimal_env(dict(os.environ)),
        restart=True,
        prepare=write_conf,
        ready=wait_answers,
    )
    if child.proc.poll() is not None or not redis_answers("127.0.0.1", port, password=password):
        raise SystemExit(f"redis-server did not start: see {data / 'redis.log'}")
    say(f"started redis-server on 127.0.0.1:{port}, password required (data in {data})")
    return f"redis://:{password}@127.0.0.1:{port}/0"


def redacted(url: str) -> str:
    return re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:***@", url)


def gpu_ids(requested: int | None, backend: str) -> list[str]:
    """GPU ids to pin one gpu worker each to; [] means one worker on the cpu backend."""
    if backend == "cpu":
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    probe = subprocess.run(
        [PY, "-c", "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"],
        capture_output=True,
        text=True,
    )
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


def web_argv(fd: int) -> list[str]:
    """daphne (webapp.core.server: request bodies bounded before they are read) on an inherited socket."""
    return [PY, "-m", "webapp.core.server", "--fd", str(fd), "webapp.asgi:application"]


def worker_argv(queue: str, name: str, concurrency: int) -> list[str]:
    return [
        PY,
        "-m",
        "celery",
        "-A",
        "webapp.celery:app",
        "worker",
        "-Q",
        queue,
        "-n",
        f"{name}@%h",
        "-c",
        str(concurrency),
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
    ]


def wait_healthy(url: str, stack: Stack, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stack.supervise():
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
        # First of all: the address asked for, or nothing (never another port).
        try:
            listener = listen(args.host, args.port, args.wait_for_port)
        except PortUnavailable as exc:
            for line in str(exc).splitlines():
                say(line)
            return 2
        backend = env.get("KERNELWRIGHT_BACKEND", "auto")
        ids = gpu_ids(args.gpu_workers, backend)
        plan = place_timing(ids) if ids and args.timing_cpus else None
        if not env.get("REDIS_URL"):
            env["REDIS_URL"] = start_private_redis(stack)
        else:
            say(f"using REDIS_URL={redacted(env['REDIS_URL'])}")
        web = env | {"SECRET_KEY": web_secret_key(env)}
        say("migrating the database")
        subprocess.run([PY, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=web, check=True)
        # The gallery's case studies ship as trajectory fixtures; loading is idempotent.
        subprocess.run([PY, "manage.py", "load_gallery"], cwd=ROOT, env=web, check=True)

        port = args.port
        fd = listener.fileno()
        web_count = max(1, args.web_processes)
        for i in range(web_count):
            # Every web process accepts on the one socket: the kernel hands each connection to one
            # of them, a dead one's share goes to the others until it is back.
            stack.start("web" if web_count == 1 else f"web{i}", web_argv(fd), web, restart=True, pass_fds=(fd,))
        say(f"{web_count} web process(es) on {args.host}:{port}")
        stack.start("agent", worker_argv("agent", "agent", args.agent_concurrency), agent_env(env), restart=True)
        untrusted = worker_env(env)
        stack.start("compile", worker_argv("compile", "compile", args.compile_concurrency), untrusted, restart=True)
        if ids:
            for i, gpu in enumerate(ids):
                genv = untrusted | {"CUDA_VISIBLE_DEVICES": gpu, "KERNELWRIGHT_BACKEND": "cuda"}
                if plan is not None:
                    genv["KERNELWRIGHT_TIMING_CPU"] = str(plan.timing_cpu[gpu])
                stack.start(f"gpu{i}", worker_argv("gpu", f"gpu{i}", max(1, args.evals_per_gpu)), genv, restart=True)
        else:
            count = max(1, args.gpu_workers or 1)
            say(f"no GPU visible: {count} gpu-queue worker(s) on the cpu backend")
            if count > 1:
                # docs/gpu-pool.md: CPU timings taken in parallel share cores and caches, so each
                # worker's numbers are disturbed by the others (measured: 7.8 ms alone, 15.7 ms with two).
                say(
                    "warning: several cpu-backend evaluation workers time on the same cores; "
                    "their speedups disturb each other. Use one unless this host has many cores."
                )
            for i in range(count):
                stack.start(
                    f"gpu{i}",
                    worker_argv("gpu", f"gpu{i}", 1),
                    untrusted | {"KERNELWRIGHT_BACKEND": "cpu"},
                    restart=True,
                )

        url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{port}"
        say(f"Kernelwright is starting at {url}/  (health: {url}/health/)")
        if wait_healthy(url, stack, args.ready_timeout):
            say(f"Kernelwright is up at {url}/  - every part healthy. Ctrl-C stops everything.")
        elif not stack.first_exited():
            say(f"{url}/healthz is not green yet: see {url}/health/")
        while True:
            dead = stack.supervise()
            if dead:
                say(f"{dead.name} {describe_exit(dead.proc.returncode)}: stopping everything")
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


# The fast tier runs in two passes. Tests marked `quiet` (tests/sandbox/conftest.py marks the
# sandbox's: they judge timers, clocks and hacks that a busy machine can hide) run alone, one at
# a time; the rest first, spread over pytest-xdist workers (their cost is compiles and sandbox
# subprocesses, not timing: on 2 cores, 19 min one at a time, 12 min as two workers).
PARALLEL_PASS = ["-m", "not slow and not quiet"]
QUIET_PASS = ["-m", "not slow and quiet"]


def workers() -> int:
    """pytest-xdist workers for the parallel pass: one per core, at most 4 (each test starts its
    own sandbox subprocesses); 0 (no workers, in-process) on one core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(4, cores) if cores > 1 else 0


def passes(pytest_args: list[str]) -> list[list[str]]:
    """`./kw test` alone runs the fast tier (what CI runs, under 20 minutes on 2 cores): every
    test not marked slow, in the two passes above. With a marker expression of its own (`-m slow`,
    `-m "slow or not slow"` for everything) or named tests, the arguments go to pytest as they
    are, in one pass."""
    if any(a == "-m" or a.startswith("-m") for a in pytest_args) or any(not a.startswith("-") for a in pytest_args):
        return [pytest_args]
    return [
        # --durations: the slowest tests listed at the end, what to move to the slow tier next
        [*PARALLEL_PASS, "-n", str(workers()), "--dist", "loadscope", "--durations=30", *pytest_args],
        [*QUIET_PASS, "--durations=30", *pytest_args],
    ]


def combined(codes: list[int]) -> int:
    """One exit code for the passes: the first failure; 5 (no tests collected) only where every
    pass collected none."""
    failed = [c for c in codes if c not in (0, 5)]
    if failed:
        return failed[0]
    return 5 if all(c == 5 for c in codes) else 0


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
        # pytest shares our process group: Ctrl-C reaches it directly; we wait for it to finish.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        codes = []
        for args in passes(pytest_args):
            proc = subprocess.Popen([PY, "-m", "pytest", *args], cwd=ROOT, env=env)
            try:
                codes.append(proc.wait())
            except Stop:
                proc.terminate()
                return proc.wait()
            if codes[-1] in (2, 3, 4):  # interrupted, internal or usage error: no second pass
                break
        return combined(codes)
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
    r.add_argument(
        "--gpu-workers",
        type=int,
        default=None,
        help="gpu-queue workers (default: one per visible GPU, or 1 on the cpu backend)",
    )
    r.add_argument(
        "--evals-per-gpu",
        type=int,
        default=2,
        help="evaluations at once on each GPU (cuda only): timed loops still take the GPU alone "
        "(sandbox device lock); 2 measured 1.5-1.6x the evaluations per minute of 1, medians "
        "within 1.6%% (docs/gpu-pool.md)",
    )
    r.add_argument(
        "--timing-cpus",
        action="store_true",
        help="give each GPU a CPU of its own for timed loops and keep every other process off it "
        "(sandbox.placement; no measured effect on the two-H200 host, docs/gpu-pool.md)",
    )
    r.add_argument(
        "--wait-for-port",
        type=float,
        default=float(os.environ.get("KERNELWRIGHT_WAIT_FOR_PORT", "0")),
        metavar="SECONDS",
        help="when the port is busy, wait this long for it to be free (default: exit at once)",
    )
    r.add_argument(
        "--web-processes",
        type=int,
        default=int(os.environ.get("KERNELWRIGHT_WEB_PROCESSES", "2")),
        help="web server processes sharing the one listening socket (default 2)",
    )
    r.add_argument("--agent-concurrency", type=int, default=2)
    r.add_argument("--compile-concurrency", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    r.add_argument("--ready-timeout", type=float, default=90.0)
    sub.add_parser("test", help="run the test suite (extra arguments go to pytest)")
    args = parser.parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
