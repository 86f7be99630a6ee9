"""Load benchmark of the live parts of the web app: `python -m webapp.bench`.

Starts one daphne (webapp.asgi) on a scratch SQLite database and a Redis database of its own,
then measures and prints:
1. latency from storing a turn (services.store_turn: save, commit, announce) to the "turn N
   ready" notification arriving in each of 50 connected websockets, and to the turn's HTML
   having been fetched over HTTP by each of them (what a browser does next); p50/p95/max;
2. 200 idle websocket viewers held on the one daphne process for a while: all still answer a
   ping afterwards; daphne's memory;
3. the job page of a 200-turn trajectory: server time and size over HTTP, and in headless
   Chromium (when /usr/bin/chromium and playwright exist) the time to the load event and to the
   charts being drawn.
Targets (issue 5): p95 under 250 ms, 200 viewers held, the page under 1 s. The numbers are
printed, never asserted: the clients share this machine's CPUs with daphne and Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# -- a minimal websocket client (RFC 6455, text frames only; enough to count notifications) ------
class WsClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, host: str, port: int, path: str) -> WsClient:
        reader, writer = await asyncio.open_connection(host, port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: http://{host}:{port}\r\n\r\n"
            ).encode()
        )
        status = await reader.readline()
        if b" 101 " not in status:
            raise ConnectionError(f"websocket upgrade refused: {status!r}")
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        return cls(reader, writer)

    async def recv(self) -> dict:
        while True:
            head = await self.reader.readexactly(2)
            opcode, length = head[0] & 0x0F, head[1] & 0x7F
            if length == 126:
                length = struct.unpack("!H", await self.reader.readexactly(2))[0]
            elif length == 127:
                length = struct.unpack("!Q", await self.reader.readexactly(8))[0]
            payload = await self.reader.readexactly(length)
            if opcode == 1:
                return json.loads(payload)
            if opcode == 8:
                raise ConnectionError("closed by the server")
            if opcode == 9:  # daphne pings idle sockets; a browser answers, so must we
                await self._frame(0x8A, payload)

    async def send(self, data: dict) -> None:
        await self._frame(0x81, json.dumps(data).encode())

    async def _frame(self, first_byte: int, payload: bytes) -> None:
        mask = os.urandom(4)
        size = bytes([0x80 | len(payload)]) if len(payload) < 126 else bytes([0x80 | 126]) + struct.pack("!H", len(payload))
        self.writer.write(bytes([first_byte]) + size + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        await self.writer.drain()

    def close(self) -> None:
        self.writer.close()


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def summary(name: str, ms: list[float]) -> str:
    return f"{name}: n={len(ms)} p50={percentile(ms, 0.5):.1f} ms p95={percentile(ms, 0.95):.1f} ms max={max(ms):.1f} ms"


# -- the stack -------------------------------------------------------------------------------
def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup_django(db_path: Path, redis_url: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    os.environ["DATABASE_URL"] = f"sqlite:///{db_path}"
    os.environ["REDIS_URL"] = redis_url
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def start_daphne(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"],
        cwd=ROOT,
        env={**os.environ, "KERNELWRIGHT_BACKEND": "cpu", "DEBUG": "0"},
        stdout=subprocess.DEVNULL,
        stderr=open(os.environ.get("KERNELWRIGHT_BENCH_DAPHNE_LOG", os.devnull), "w"),  # noqa: SIM115
        start_new_session=True,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/gallery/", timeout=2).read()
            return proc
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise RuntimeError("daphne did not start")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- 1. latency ------------------------------------------------------------------------------
def bench_latency(port: int, job, clients: int, turns: int, fetch_turns: bool, first_index: int) -> None:
    from webapp.jobs import services
    from webapp.jobs.sample_trajectory import build
    from webapp.jobs.turns import group_by_turn

    events = group_by_turn(build(turns=first_index + turns)["events"])
    ws_ms: list[float] = []
    fetch_ms: list[float] = []
    sent: dict[int, float] = {}
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    done = threading.Event()
    failed: list[str] = []

    def fetch(index: int) -> None:
        url = f"http://127.0.0.1:{port}/jobs/{job.pk}/updates/?since={index - 1}"
        body = json.loads(urllib.request.urlopen(url, timeout=30).read())
        if f'id="turn-{index}"' not in body["html"]:
            raise RuntimeError(f"turn {index} missing from the fetched update")

    async def viewer() -> None:
        ws = await WsClient.connect("127.0.0.1", port, f"/ws/jobs/{job.pk}/")
        try:
            got = 0
            while got < turns:
                note = await ws.recv()
                if note.get("kind") != "turn.ready":
                    continue
                now = time.perf_counter()
                ws_ms.append((now - sent[note["turn"]]) * 1000)
                if fetch_turns:
                    await loop.run_in_executor(None, fetch, note["turn"])
                    fetch_ms.append((time.perf_counter() - sent[note["turn"]]) * 1000)
                got += 1
        finally:
            ws.close()

    async def main() -> None:
        tasks = []
        for _ in range(clients):
            tasks.append(asyncio.ensure_future(viewer()))
            await asyncio.sleep(0.01)
        await asyncio.sleep(1.0)
        ready.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        failed.extend(type(r).__name__ for r in results if isinstance(r, BaseException))

    def run_loop() -> None:
        from concurrent.futures import ThreadPoolExecutor

        loop.set_default_executor(ThreadPoolExecutor(max_workers=16))
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(main())
        finally:
            done.set()

    thread = threading.Thread(target=run_loop, daemon=True)
    thread.start()
    ready.wait(60)
    for index in range(first_index + 1, first_index + turns + 1):
        sent[index] = time.perf_counter()
        services.store_turn(job, index, events[index])
        time.sleep(1.0)
    done.wait(120)
    if failed:
        print(f"  {len(failed)} of {clients} viewers lost their socket: {sorted(set(failed))}")
    label = "with each client then fetching the turn" if fetch_turns else "notification only"
    print(summary(f"stored turn -> websocket notification, {label} ({clients} clients x {turns} turns)", ws_ms))
    if fetch_turns:
        print(summary("stored turn -> turn HTML fetched over HTTP by each client", fetch_ms))
    print(f"  target: p95 under 250 ms for the notification -> {'met' if percentile(ws_ms, 0.95) < 250 else 'NOT met'}")


# -- 2. idle viewers -------------------------------------------------------------------------
def bench_idle(port: int, daphne_pid: int, job, viewers: int, hold_s: float) -> None:
    async def main() -> None:
        before = rss_mb(daphne_pid)
        t0 = time.perf_counter()
        sockets = []
        for i in range(viewers):
            sockets.append(await WsClient.connect("127.0.0.1", port, f"/ws/jobs/{job.pk}/"))
            if i % 50 == 49:
                await asyncio.sleep(0.05)
        connect_s = time.perf_counter() - t0
        await asyncio.sleep(hold_s)
        alive, failures = 0, {}
        for ws in sockets:
            try:
                await ws.send({"kind": "ping"})
                while True:
                    note = await asyncio.wait_for(ws.recv(), 10)
                    if note.get("kind") == "pong":
                        alive += 1
                        break
            except (TimeoutError, ConnectionError, asyncio.IncompleteReadError) as exc:
                failures[type(exc).__name__] = failures.get(type(exc).__name__, 0) + 1
        if failures:
            print(f"  viewers that did not answer: {failures}")
        after = rss_mb(daphne_pid)
        for ws in sockets:
            ws.close()
        print(
            f"idle viewers: {viewers} connected in {connect_s:.1f} s, held {hold_s:.0f} s, {alive}/{viewers} answered a ping afterwards; "
            f"daphne RSS {before:.0f} -> {after:.0f} MB"
        )

    asyncio.run(main())


# -- 3. a 200-turn job page ------------------------------------------------------------------
def bench_page(port: int, turns: int, repeat: int) -> None:
    from webapp.jobs.importer import import_trajectory
    from webapp.jobs.models import Job
    from webapp.jobs.sample_trajectory import build

    job = import_trajectory(None, build(turns=turns, name=f"{turns}-turn benchmark"))
    Job.objects.filter(pk=job.pk).update(visibility=Job.Visibility.PUBLIC)
    url = f"http://127.0.0.1:{port}/jobs/{job.pk}/"
    # daphne's cache is per process and cold for this job (it was imported here), so the first
    # view renders its unfolded turns; later views reuse them.
    t0 = time.perf_counter()
    body = urllib.request.urlopen(url, timeout=60).read()
    print(f"job page with {turns} turns, HTML over HTTP, first view (daphne's cache cold): {(time.perf_counter() - t0) * 1000:.0f} ms, {len(body) / 1e6:.2f} MB")
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        urllib.request.urlopen(url, timeout=60).read()
        times.append((time.perf_counter() - t0) * 1000)
    print(summary(f"job page with {turns} turns, HTML over HTTP, later views (rendered turns cached)", times))
    chromium = os.environ.get("KERNELWRIGHT_CHROMIUM", "/usr/bin/chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("  (playwright not installed: no browser timing)")
        return
    if not Path(chromium).exists():
        print(f"  (no {chromium}: no browser timing)")
        return
    loads, drawn, nav = [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()  # one tab, navigated again and again (a returning user)
        for _ in range(repeat + 1):
            t0 = time.perf_counter()
            page.goto(url, wait_until="load")
            page.wait_for_selector(f"#turn-{turns}", state="attached")
            loads.append((time.perf_counter() - t0) * 1000)
            nav.append(page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd"))
            page.wait_for_selector("#chart-speedup.drawn .main-svg", timeout=60000)
            drawn.append((time.perf_counter() - t0) * 1000)
            page.goto("about:blank")
        browser.close()
    print(f"job page with {turns} turns in Chromium, first navigation: load {loads[0]:.0f} ms, charts drawn {drawn[0]:.0f} ms")
    loads, drawn, nav = loads[1:], drawn[1:], nav[1:]
    print(summary(f"job page with {turns} turns in Chromium, to the load event (Navigation Timing)", nav))
    print(summary(f"job page with {turns} turns in Chromium, goto() until every turn is in the page", loads))
    print(summary(f"job page with {turns} turns in Chromium, to the charts drawn (plotly.js loads after the page)", drawn))
    print(f"  target: page loaded under 1 s -> {'met' if percentile(nav, 0.5) < 1000 else 'NOT met'} (median, load event)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--turns", type=int, default=10, help="turns stored during the latency run")
    parser.add_argument("--viewers", type=int, default=200)
    parser.add_argument("--hold", type=float, default=20.0, help="seconds the idle viewers stay connected")
    parser.add_argument("--page-turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--redis", default=os.environ.get("KERNELWRIGHT_BENCH_REDIS", "redis://127.0.0.1:6379/13"))
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="kw-bench-") as tmp:
        setup_django(Path(tmp) / "bench.sqlite3", args.redis)
        from webapp.jobs import services
        from webapp.jobs.models import Job
        from webapp.jobs.sample_trajectory import SOFTMAX_TASK

        job = services.create_job(None, "bench", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False)
        Job.objects.filter(pk=job.pk).update(visibility=Job.Visibility.PUBLIC)
        services.start_job(job)
        port = free_port()
        daphne = start_daphne(port)
        try:
            print(f"daphne pid {daphne.pid} on port {port}; redis {args.redis}; {os.cpu_count()} CPUs shared by daphne, Redis and the clients")
            bench_latency(port, job, args.clients, args.turns, fetch_turns=False, first_index=0)
            bench_latency(port, job, args.clients, args.turns, fetch_turns=True, first_index=args.turns)
            bench_idle(port, daphne.pid, job, args.viewers, args.hold)
            bench_page(port, args.page_turns, args.repeat)
        finally:
            daphne.terminate()
            try:
                daphne.wait(15)
            except subprocess.TimeoutExpired:
                daphne.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
