"""The live stack for tests: Celery worker and daphne subprocesses on the test database and Redis."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

from tests.support.processes import ManagedProcess, free_port, wait_for

QUEUE_WORKER_NAMES = {"agent": "agent", "compile": "compile", "gpu": "gpu0"}


def database_url(settings_dict: dict) -> str:
    """A DATABASE_URL for another process to open the same database as `settings_dict`."""
    engine = settings_dict["ENGINE"]
    if engine.endswith("sqlite3"):
        name = str(settings_dict["NAME"])
        if name in ("", ":memory:") or name.startswith("file:"):
            raise ValueError("an in-memory SQLite database cannot be shared with a subprocess")
        return f"sqlite:///{Path(name).resolve()}"
    if "postgresql" in engine:
        user = quote(settings_dict.get("USER") or "")
        password = quote(settings_dict.get("PASSWORD") or "")
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        host = settings_dict.get("HOST") or "127.0.0.1"
        port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
        return f"postgres://{auth}{host}{port}/{quote(settings_dict['NAME'])}"
    raise ValueError(f"no DATABASE_URL for engine {engine}")


def stack_env(database: str, redis: str, **extra: str) -> dict[str, str]:
    env = os.environ.copy()
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "webapp.settings",
            "DATABASE_URL": database,
            "REDIS_URL": redis,
            "PYTHONUNBUFFERED": "1",
            "KERNELWRIGHT_BACKEND": env.get("KERNELWRIGHT_TEST_BACKEND", "cpu"),
        }
    )
    env.update(extra)
    return env


def start_worker(queue: str, env: dict[str, str], log_dir: Path, node: str | None = None) -> ManagedProcess:
    node = node or QUEUE_WORKER_NAMES[queue]
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "webapp.celery:app",
        "worker",
        "-Q",
        queue,
        "-n",
        f"{node}@%h",
        "-c",
        "1",
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
    ]
    return ManagedProcess.start(f"worker-{node}", argv, env, log_dir)


def wait_for_workers(workers: dict[str, ManagedProcess], broker_url: str, timeout: float = 90.0) -> None:
    """Until every worker answers a ping over the broker (so it consumes its queue)."""
    from webapp.celery import app

    wanted = {QUEUE_WORKER_NAMES[q] for q in workers}

    def all_answer() -> bool:
        for proc in workers.values():
            if not proc.alive:
                raise RuntimeError(f"{proc.name} exited ({proc.proc.returncode}):\n{proc.log_tail()}")
        with app.connection_for_write(url=broker_url) as conn:
            replies = app.control.inspect(timeout=0.5, connection=conn).ping() or {}
        return wanted <= {name.split("@", 1)[0] for name in replies}

    try:
        wait_for(all_answer, timeout, interval=0.5, what=f"workers {sorted(wanted)}")
    except TimeoutError as exc:
        logs = "\n".join(f"--- {p.name}\n{p.log_tail(2000)}" for p in workers.values())
        raise TimeoutError(f"{exc}\n{logs}") from exc


class LiveAsgiServer:
    def __init__(self, process: ManagedProcess, url: str) -> None:
        self.process = process
        self.url = url

    def get(self, path: str, timeout: float = 30.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()


def start_asgi_server(env: dict[str, str], log_dir: Path, timeout: float = 60.0) -> LiveAsgiServer:
    port = free_port()
    argv = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"]
    process = ManagedProcess.start("daphne", argv, env, log_dir)
    server = LiveAsgiServer(process, f"http://127.0.0.1:{port}")

    def answers() -> bool:
        if not process.alive:
            raise RuntimeError(f"daphne exited ({process.proc.returncode}):\n{process.log_tail()}")
        server.get("/static/plotly/plotly.min.js", timeout=5)
        return True

    try:
        wait_for(answers, timeout, interval=0.3, what="daphne")
    except TimeoutError:
        process.stop()
        raise
    return server
