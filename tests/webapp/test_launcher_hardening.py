"""`./kw run` hardened (issue 16): a private Redis with a password on loopback, each child with only
the secrets it needs, and a dead worker or web server started again instead of the whole service
stopping.

One launcher for the module (it takes a while to come up); the tests read its children's
/proc entries, talk to its Redis, and kill its children.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.processes import ROOT, free_port, wait_for
from tests.webapp.test_health_launcher import healthz

pytestmark = pytest.mark.slow

MODEL_KEY = "sk-model-key-for-the-agent-only"
WEB_SECRET = "web-secret-key-for-daphne-only"
OTHER_TOKEN = "hf-token-nobody-running-candidates-needs"


def load_launcher():
    spec = importlib.util.spec_from_file_location("kw_launcher", ROOT / "scripts" / "launcher.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


launcher = load_launcher()


# -- which child gets which secret (no processes) -------------------------------------------------
ENV = {
    "PATH": "/usr/bin",
    "OPENAI_API_KEY": MODEL_KEY,
    "OPENAI_BASE_URL": "http://model/v1",
    "SECRET_KEY": WEB_SECRET,
    "HF_TOKEN": OTHER_TOKEN,
    "AWS_SECRET_ACCESS_KEY": "aws",
    "DATABASE_URL": "postgres://u@h/db",
    "PGPASSWORD": "pg",
    "REDIS_URL": "redis://:pw@127.0.0.1:1/0",
    "KERNELWRIGHT_BACKEND": "cpu",
}


def test_workers_that_run_untrusted_code_get_no_secret_they_do_not_need() -> None:
    env = launcher.worker_env(ENV)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY"):
        assert name not in env
    assert env["SECRET_KEY"] != WEB_SECRET and env["SECRET_KEY"].startswith("throwaway-")
    # what they do need: the database, Redis, their settings
    for name in ("DATABASE_URL", "PGPASSWORD", "REDIS_URL", "KERNELWRIGHT_BACKEND", "PATH"):
        assert env[name] == ENV[name]


def test_the_agent_worker_keeps_the_model_endpoint_but_not_the_web_servers_key() -> None:
    env = launcher.agent_env(ENV)
    assert env["OPENAI_API_KEY"] == MODEL_KEY and env["OPENAI_BASE_URL"] == "http://model/v1"
    assert env["SECRET_KEY"] != WEB_SECRET
    assert launcher.worker_env(ENV)["SECRET_KEY"] != env["SECRET_KEY"]  # each a random one


def test_redis_urls_are_logged_without_their_password() -> None:
    assert launcher.redacted("redis://:s3cret@10.0.0.1:6379/0") == "redis://:***@10.0.0.1:6379/0"
    assert launcher.redacted("redis://user:s3cret@h/0") == "redis://user:***@h/0"
    assert launcher.redacted("redis://h:6379/0") == "redis://h:6379/0"


def test_exits_are_described_for_people() -> None:
    assert launcher.describe_exit(-9) == "was killed by SIGKILL"
    assert launcher.describe_exit(3) == "exited with code 3"


# -- the real thing ---------------------------------------------------------------------------------
@dataclass
class Proc:
    pid: int
    ppid: int
    argv: list[str]

    @property
    def environ(self) -> dict[str, str]:
        raw = Path(f"/proc/{self.pid}/environ").read_bytes()
        return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def processes() -> dict[int, Proc]:
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if stat[0] != "Z":
            found[int(entry.name)] = Proc(int(entry.name), int(stat[1]), argv)
    return found


def children(pid: int) -> dict[str, Proc]:
    """The launcher's direct children by role: redis, web, agent, compile, gpu0."""
    roles = {}
    for p in processes().values():
        if p.ppid != pid:
            continue
        line = " ".join(p.argv)
        if "redis-server" in line:
            roles["redis"] = p
        elif "daphne" in line or "webapp.core.server" in line:
            roles["web"] = p
        elif " worker " in line:
            roles[p.argv[p.argv.index("-n") + 1].split("@")[0]] = p
    return roles


def green(url: str) -> dict:
    def ok():
        status, report = healthz(url)
        return status == 200 and report

    return wait_for(ok, timeout=150, interval=1, what="a green /healthz")


@dataclass
class Launched:
    proc: subprocess.Popen
    url: str
    log: Path
    var: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    if not shutil.which("redis-server"):
        pytest.skip("needs redis-server for the launcher's private Redis")
    tmp = tmp_path_factory.mktemp("launcher")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {
        "DATABASE_URL": f"sqlite:///{tmp / 'app.sqlite3'}",
        "KERNELWRIGHT_VAR_DIR": str(tmp / "var"),
        "KERNELWRIGHT_BACKEND": "cpu",
        "OPENAI_API_KEY": MODEL_KEY,
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "SECRET_KEY": WEB_SECRET,
        "HF_TOKEN": OTHER_TOKEN,
    }
    log = tmp / "launcher.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
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
                "--web-processes",
                "1",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    launched = Launched(proc, f"http://127.0.0.1:{port}", log, tmp / "var")
    try:
        green(launched.url)
        yield launched
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        print(launched.output()[-4000:])


def test_each_child_gets_only_the_secrets_it_needs(launched) -> None:
    roles = children(launched.proc.pid)
    assert {"redis", "web", "agent", "compile", "gpu0"} <= set(roles), roles

    web, agent = roles["web"].environ, roles["agent"].environ
    assert web["SECRET_KEY"] == WEB_SECRET and web["OPENAI_API_KEY"] == MODEL_KEY
    assert agent["OPENAI_API_KEY"] == MODEL_KEY and agent["SECRET_KEY"] != WEB_SECRET
    for role in ("compile", "gpu0"):
        env = roles[role].environ
        assert "OPENAI_API_KEY" not in env and "OPENAI_BASE_URL" not in env and "HF_TOKEN" not in env, role
        assert env["SECRET_KEY"] != WEB_SECRET, role
        assert env["REDIS_URL"] == web["REDIS_URL"]  # what they do need
    assert not {"OPENAI_API_KEY", "SECRET_KEY", "HF_TOKEN", "REDIS_URL"} & set(roles["redis"].environ)


def test_the_private_redis_wants_a_password_and_listens_on_loopback_only(launched) -> None:
    import redis

    roles = children(launched.proc.pid)
    url = urlsplit(roles["agent"].environ["REDIS_URL"])
    assert url.hostname == "127.0.0.1" and url.password and len(url.password) >= 32
    # On no command line, in no file left behind.
    assert not any(url.password in " ".join(p.argv) for p in processes().values())
    assert not [
        f for f in (launched.var / "redis").rglob("*") if f.is_file() and url.password.encode() in f.read_bytes()
    ]
    assert (launched.var / "redis").stat().st_mode & 0o077 == 0

    with socket.create_connection(("127.0.0.1", url.port), timeout=5) as s:
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        assert s.recv(128).startswith(b"-NOAUTH")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=url.port, password="guessed", socket_timeout=5).ping()
    client = redis.Redis.from_url(url.geturl(), socket_timeout=5)
    try:
        assert client.ping()
        assert client.config_get("bind")["bind"] == "127.0.0.1"
        assert client.config_get("protected-mode")["protected-mode"] == "yes"
    finally:
        client.close()


def wait_replaced(launched: Launched, role: str, old_pid: int) -> Proc:
    def replaced():
        new = children(launched.proc.pid).get(role)
        return new if new and new.pid != old_pid else None

    return wait_for(replaced, timeout=60, interval=0.3, what=f"a new {role}")


@pytest.mark.parametrize("role", ["gpu0", "agent", "web"])
def test_a_dead_child_is_started_again_and_the_service_stays_up(launched, role) -> None:
    old = children(launched.proc.pid)[role]
    group = os.getpgid(old.pid)

    os.kill(old.pid, signal.SIGKILL)  # the worst a task could do to its worker

    new = wait_replaced(launched, role, old.pid)
    assert launched.proc.poll() is None  # the launcher (and so the rest) kept running
    assert f"{role} was killed by SIGKILL" in launched.output()
    assert f"restarting {role}" in launched.output()
    # What the dead one left in its group (pool processes) went with it.
    assert not [p for p in processes().values() if p.pid != new.pid and _pgid(p.pid) == group]
    report = green(launched.url)
    assert report["ok"]


def test_a_child_that_keeps_dying_is_restarted_with_a_growing_delay(launched) -> None:
    delays = []
    for _ in range(3):
        old = children(launched.proc.pid)["compile"]
        os.kill(old.pid, signal.SIGKILL)
        wait_replaced(launched, "compile", old.pid)
    for line in launched.output().splitlines():
        if line.startswith("[kw] compile was killed by SIGKILL"):
            delays.append(int(line.split("starting it again in ")[1].split(" s")[0]))
    assert delays[-3:] == [1, 2, 5]
    time.sleep(1)
    assert launched.proc.poll() is None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None
