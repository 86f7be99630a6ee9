"""A live job on `./kw run` survives its workers and its Redis being killed (issue 20).

One launcher (private redis-server, sqlite, the cpu backend, the scripted model as the endpoint)
runs one job of many evaluations. In turn, during the job: the gpu worker is killed with SIGKILL
in the middle of an evaluation (its evaluation stops with it, the agent sends it again, and the
dead evaluation's progress never shows), then the agent worker (the job goes back to the queue
with the reason, then resumes from its stored turns on the restarted worker), then the compile
worker, then the redis-server (pages keep being served, /health says Redis is down and then
green again, the job page in Chromium reconnects its websocket). The job must end (succeeded, or
failed with a reason), and every turn stored before a kill must still be there, unchanged but
for events appended to it.

Heartbeats are short here (1 s, stale after 8 s) so that the test waits seconds, not the
defaults' half minute.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.testing.scenarios import call, candidate, reply, write_all
from agent.testing.scripted_server import ScriptedServer
from tests.support.processes import ROOT, free_port, wait_for
from tests.webapp.test_launcher_hardening import children, processes
from tests.webapp.test_launcher_keeps_its_port import stop_launcher

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
TASK = (Path(__file__).parent / "data" / "row_softmax_small.py").read_text()


@dataclass
class Service:
    proc: subprocess.Popen
    url: str
    db: Path
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def manage(self, code: str) -> str:
        env = os.environ | {"DATABASE_URL": f"sqlite:///{self.db}", "DJANGO_SETTINGS_MODULE": "webapp.settings"}
        out = subprocess.run(
            [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        return (out.stdout.strip().splitlines() or [""])[-1]

    def job(self, pk: int) -> dict:
        with sqlite3.connect(self.db, timeout=20) as conn:
            conn.row_factory = sqlite3.Row
            row = dict(
                conn.execute("SELECT state, step, reason, attempts FROM jobs_job WHERE id = ?", (pk,)).fetchone()
            )
            row["turns"] = {
                i: json.loads(e)
                for i, e in conn.execute(
                    'SELECT "index", events FROM jobs_turn WHERE job_id = ? ORDER BY "index"', (pk,)
                )
            }
        return row

    def get(self, path: str, timeout: float = 10) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()


def script() -> dict:
    files = candidate("cpu")
    evaluate = [reply(call("evaluate"), content="Measuring again.") for _ in range(9)]
    return {
        "replies": [
            reply(call("read_file", path="reference.py")),
            reply(*write_all(files)),
            reply(call("compile")),
            *evaluate,
        ],
        "when_exhausted": "finish",
    }


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    if not shutil.which("redis-server"):
        pytest.skip("needs redis-server for the launcher's private Redis")
    tmp = tmp_path_factory.mktemp("lost")
    model = ScriptedServer(script()).start()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {
        "DATABASE_URL": f"sqlite:///{tmp / 'app.sqlite3'}",
        "KERNELWRIGHT_VAR_DIR": str(tmp / "var"),
        "KERNELWRIGHT_BACKEND": "cpu",
        "OPENAI_BASE_URL": model.url,
        "OPENAI_API_KEY": "sk-scripted",
        "KERNELWRIGHT_MODEL": "scripted-model",
        "KERNELWRIGHT_HEARTBEAT_S": "1",
        "KERNELWRIGHT_HEARTBEAT_STALE_S": "8",
        "KERNELWRIGHT_MONITOR_INTERVAL_S": "1",
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
                "--web-processes",
                "1",
                "--agent-concurrency",
                "1",
                "--compile-concurrency",
                "1",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    service = Service(proc, f"http://127.0.0.1:{port}", tmp / "app.sqlite3", log)
    try:
        wait_for(lambda: service.get("/healthz")[0] == 200, 180, interval=1, what="a green /healthz")
        yield service
    finally:
        stop_launcher(proc)
        model.stop()
        shutil.copy(log, Path(os.environ.get("KERNELWRIGHT_TEST_LOG_DIR", tmp)) / "lost-workers-launcher.log")
        print("\n".join(line for line in service.output().splitlines() if line.startswith("[kw]")))


def post_job(service: Service, token: str) -> int:
    body = json.dumps(
        {
            "name": "softmax under fire",
            "source": TASK,
            "options": {"backend": "cpu", "policy": "openai", "max_turns": 6},
        }
    ).encode()
    req = urllib.request.Request(
        service.url + "/api/jobs",
        data=body,
        method="POST",
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["id"]


def kill(service: Service, role: str) -> int:
    victim = children(service.proc.pid)[role]
    os.kill(victim.pid, signal.SIGKILL)
    return victim.pid


def assert_kept(before: dict[int, list], after: dict[int, list]) -> None:
    """No stored turn lost: each is still there, its events as before (a late event may follow)."""
    for index, events in before.items():
        assert index in after, f"turn {index} was lost"
        assert after[index][: len(events)] == events, f"turn {index} was rewritten"


def test_kill_each_worker_and_redis_during_a_live_job(service: Service, chromium_browser) -> None:
    token = service.manage(
        "from django.contrib.auth.models import User; from webapp.jobs.models import ApiToken\n"
        "u = User.objects.create_user('victim', password='pw-victim-123'); print(ApiToken.issue(u)[1])"
    )
    pk = post_job(service, token)
    service.manage(f"from webapp.jobs.models import Job; Job.objects.filter(pk={pk}).update(visibility='public')")
    page = chromium_browser.new_page()
    page.goto(f"{service.url}/jobs/{pk}/")
    page.wait_for_selector("body[data-ws='open']", timeout=30000)

    # 1. The gpu worker, in the middle of an evaluation.
    wait_for(
        lambda: "checking correctness" in service.job(pk)["step"] or "timing" in service.job(pk)["step"],
        300,
        interval=0.2,
        what="an evaluation under way",
    )
    before = service.job(pk)
    gpu_pool = [p.pid for p in processes().values() if p.ppid == children(service.proc.pid)["gpu0"].pid]
    kill(service, "gpu0")
    # Its pool process (running the evaluation) goes with it, so the evaluation stops.
    wait_for(
        lambda: not any(pid in processes() for pid in gpu_pool), 20, what="the dead gpu worker's pool process to end"
    )
    step_at_kill = service.job(pk)["step"]
    # The agent sees the evaluation lost and sends it again to the restarted worker.
    wait_for(
        lambda: "the worker running evaluate" in service.output() or service.job(pk)["step"] != step_at_kill,
        120,
        interval=0.5,
        what="the evaluation sent again",
    )
    assert_kept(before["turns"], service.job(pk)["turns"])

    # 2. The agent worker: the job goes back to the queue with the reason, then resumes.
    wait_for(lambda: len(service.job(pk)["turns"]) >= 5, 300, interval=0.5, what="a few more turns")
    before = service.job(pk)
    kill(service, "agent")

    def taken_back():
        j = service.job(pk)
        return (
            j
            if j["attempts"] > before["attempts"] or (j["state"] == "queued" and "stopped answering" in j["reason"])
            else None
        )

    requeued = wait_for(taken_back, 90, interval=0.2, what="the job taken back from the dead worker")
    assert requeued["attempts"] > before["attempts"] or "resumes from its" in requeued["reason"]
    assert "agent worker stopped answering" in service.output() or requeued["state"] == "queued"
    wait_for(
        lambda: service.job(pk)["attempts"] == before["attempts"] + 1 and service.job(pk)["state"] == "running",
        120,
        interval=0.5,
        what="the job resumed on the restarted agent worker",
    )
    assert_kept(before["turns"], service.job(pk)["turns"])

    # 3. The compile worker (between builds): the job goes on; the service is whole again.
    kill(service, "compile")
    wait_for(lambda: service.get("/healthz", timeout=30)[0] == 200, 180, interval=1, what="the compile worker back")

    # 4. The redis-server: pages are still served, /health tells the truth, the page reconnects.
    before = service.job(pk)
    if before["state"] == "running":
        kill(service, "redis")
        status, body = service.get(f"/jobs/{pk}/")
        assert status == 200 and b"softmax under fire" in body  # served without Redis
        code, report = service.get("/healthz", timeout=30)
        if code == 503:  # caught while it was down (the launcher restarts it within seconds)
            assert not json.loads(report)["parts"]["redis"]["ok"]
        wait_for(lambda: service.get("/healthz", timeout=30)[0] == 200, 60, interval=1, what="/healthz green again")
        page.wait_for_selector("body[data-ws='open']", timeout=60000)

    # The end: succeeded, or failed with a reason, and no stored turn lost.
    final = wait_for(
        lambda: (j := service.job(pk))["state"] in ("succeeded", "failed") and j, 900, interval=1, what="the job to end"
    )
    assert final["state"] == "succeeded" or final["reason"], final
    assert_kept(before["turns"], final["turns"])
    assert final["attempts"] >= 2
    out = service.output()
    for role in ("gpu0", "agent", "compile"):
        assert f"{role} was killed by SIGKILL" in out and f"restarting {role}" in out
    page.close()
