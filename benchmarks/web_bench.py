"""Load benchmark of the live parts of the web app: `python -m webapp.bench --viewers 50 200`.

The stack is what `./kw run` runs: `--web-processes` (default 2) web server processes
(webapp.core.server, daphne) accepting on one listening socket opened here, on a scratch SQLite
database and a Redis database of its own (KERNELWRIGHT_BENCH_REDIS, default db 13).

**viewers** (issue 20), for each count N of `--viewers`: N people watch one running job (a public
job with 20 turns stored). They arrive over `--ramp` seconds; each loads the job page (timed:
"page"), opens the job's websocket (every one must connect) and then does what the page's script
does: after each (re)connect it fetches /jobs/<id>/updates/ since the last turn it has; on each
"turn N ready" it shows the turn the notice carries when it follows its last one, else fetches
/updates/ (either way timed from the commit that stored the turn: "turn stored -> browser");
every 8-15 s it reloads the page (timed too). `--fetch`: every notice is followed by a fetch, as
the page did before notices carried the turn (and as any page does against a server whose
notices do not). Meanwhile a turn is stored every second, with two progress steps between turns,
like a real run, by a process of its own (as by a worker). Printed: page p50/p95/max, websockets
connected, the commit -> all the turn's notices handed to Redis in the storing process (the turn's,
then the charts' where the server sends them apart), notification latency, turn shown latency,
how many turns came with the notice and how many by a fetch, the fetches' own times and
viewer-cache hits, errors. Targets: at 50 viewers page p95 <= 300 ms, turn stored ->
browser p95 <= 250 ms, every websocket connects; at 200 it may be slower but without errors.

The older sections (`--sections latency,idle,page`): 1. store -> notification latency for
`--clients` sockets, 2. `--idle` idle sockets held for `--hold` s, 3. a 200-turn job page over
HTTP and in Chromium. The numbers are printed, never asserted: the clients share this machine's
CPUs with the servers and Redis.
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
        size = (
            bytes([0x80 | len(payload)])
            if len(payload) < 126
            else bytes([0x80 | 126]) + struct.pack("!H", len(payload))
        )
        self.writer.write(bytes([first_byte]) + size + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        await self.writer.drain()

    def close(self) -> None:
        self.writer.close()


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def summary(name: str, ms: list[float]) -> str:
    return (
        f"{name}: n={len(ms)} p50={percentile(ms, 0.5):.1f} ms p95={percentile(ms, 0.95):.1f} ms max={max(ms):.1f} ms"
    )


# -- the stack -------------------------------------------------------------------------------
def setup_django(db_path: Path, redis_url: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    os.environ["DATABASE_URL"] = f"sqlite:///{db_path}"
    os.environ["REDIS_URL"] = redis_url
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def start_web(count: int) -> tuple[list[subprocess.Popen], int, object]:
    """`count` web processes on one listening socket, as the launcher starts them."""
    import socket

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    sock.set_inheritable(True)
    port = sock.getsockname()[1]
    log = os.environ.get("KERNELWRIGHT_BENCH_DAPHNE_LOG", os.devnull)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "webapp.core.server", "--fd", str(sock.fileno()), "webapp.asgi:application"],
            cwd=ROOT,
            env={**os.environ, "KERNELWRIGHT_BACKEND": "cpu", "DEBUG": "0"},
            pass_fds=(sock.fileno(),),
            stdout=subprocess.DEVNULL,
            stderr=open(log, "a"),
            start_new_session=True,
        )
        for _ in range(count)
    ]
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            for _ in range(2 * count):  # each process warm (the kernel spreads the connections)
                urllib.request.urlopen(f"http://127.0.0.1:{port}/gallery/", timeout=5).read()
            return procs, port, sock
        except OSError:
            time.sleep(0.3)
    for proc in procs:
        proc.terminate()
    raise RuntimeError("the web server did not start")


def start_daphne(port: int) -> subprocess.Popen:
    """One plain daphne on `port` (kept for comparisons: `--web-processes 0`)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"],
        cwd=ROOT,
        env={**os.environ, "KERNELWRIGHT_BACKEND": "cpu", "DEBUG": "0"},
        stdout=subprocess.DEVNULL,
        stderr=open(os.environ.get("KERNELWRIGHT_BENCH_DAPHNE_LOG", os.devnull), "w"),
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


# -- viewers of one running job -------------------------------------------------------------------
class Http:
    """HTTP/1.1 GETs over one kept-alive connection, like a browser tab."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.headers: dict[str, str] = {}  # the last answer's

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def get(self, path: str) -> tuple[int, bytes]:
        for attempt in (0, 1):
            try:
                if self.writer is None:
                    self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
                self.writer.write(
                    f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nAccept: */*\r\n\r\n".encode()
                )
                await self.writer.drain()
                line = await self.reader.readline()
                if not line:
                    raise ConnectionError("closed")
                status = int(line.split()[1])
                headers = {}
                while (h := await self.reader.readline()) not in (b"\r\n", b""):
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    body = b""
                    while size := int((await self.reader.readline()).strip() or b"0", 16):
                        body += await self.reader.readexactly(size)
                        await self.reader.readline()
                    await self.reader.readline()
                else:
                    body = await self.reader.readexactly(int(headers.get("content-length", 0)))
                if headers.get("connection", "").lower() == "close":
                    self.close()
                self.headers = headers
                return status, body
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")


class Tally:
    """What the viewers measured, in ms, and what went wrong."""

    def __init__(self) -> None:
        from collections import Counter

        self.page, self.ws, self.notify, self.browser, self.fetch, self.catch_up = [], [], [], [], [], []
        self.announce: list[float] = []  # commit -> the turn's notices handed to Redis, in the storing process
        self.notify_at: list[tuple[int, float]] = []  # (turn, when its notice arrived)
        self.browser_at: list[tuple[int, float]] = []  # (turn, when it was shown)
        self.errors: Counter = Counter()
        self.ws_ok = self.pushed = self.fetched = self.cached = 0

    def ws_failed(self) -> int:
        return sum(v for k, v in self.errors.items() if k.startswith("websocket"))


def bench_viewers(
    port: int, job, viewers: int, turns: int, ramp_s: float, first_index: int, web: int, fetch_always: bool = False
) -> dict:
    """N viewers doing what the page's script does (webapp/jobs/static/jobs/job.js): on a
    (re)connect, fetch /updates/ since the last turn it has; on "turn ready", show the turn the
    notice carries when it follows the last one (no fetch), else fetch /updates/. With
    `fetch_always`, every notice is followed by a fetch (the page before notices carried turns)."""
    import random

    tally = Tally()
    loop = asyncio.new_event_loop()
    joined, done = threading.Event(), threading.Event()
    arrived = [0]
    page = f"/jobs/{job.pk}/"

    async def open_ws() -> WsClient | None:
        t0 = time.perf_counter()
        try:
            ws = await asyncio.wait_for(WsClient.connect("127.0.0.1", port, f"/ws/jobs/{job.pk}/"), 10)
        except (TimeoutError, ConnectionError, OSError) as exc:
            tally.errors[f"websocket {type(exc).__name__}"] += 1
            return None
        tally.ws.append((time.perf_counter() - t0) * 1000)
        tally.ws_ok += 1
        return ws

    async def load_page(http: Http) -> None:
        t0 = time.perf_counter()
        try:
            status, _ = await asyncio.wait_for(http.get(page), 30)
        except (TimeoutError, ConnectionError, OSError) as exc:
            tally.errors[f"page {type(exc).__name__}"] += 1
            return
        tally.page.append((time.perf_counter() - t0) * 1000)
        if status != 200:
            tally.errors[f"page HTTP {status}"] += 1

    async def fetch_updates(fetcher: Http, last: int, turn: int | None) -> int:
        """GET /updates/?since=last as the page does; the new last index (unchanged on an error)."""
        t0 = time.perf_counter()
        try:
            status, body = await asyncio.wait_for(fetcher.get(f"/jobs/{job.pk}/updates/?since={last}"), 30)
        except (TimeoutError, ConnectionError, OSError) as exc:
            tally.errors[f"updates {type(exc).__name__}"] += 1
            return last
        if status != 200:
            tally.errors[f"updates HTTP {status}"] += 1
            return last
        data = json.loads(body)
        if turn is not None and turn > last and f'id="turn-{turn}"' not in data["html"]:
            tally.errors["fetched update without its turn"] += 1
        tally.cached += fetcher.headers.get("x-kernelwright-cache") == "viewer"
        (tally.fetch if turn is not None else tally.catch_up).append((time.perf_counter() - t0) * 1000)
        return max(last, data["last_index"])

    def pushed(note: dict, last: int) -> bool:
        """Whether the notice's own update shows the turn (as job.js's turnReady decides)."""
        update = None if fetch_always else note.get("update")
        if update is None or note["turn"] > last + 1:
            return False
        if f'id="turn-{note["turn"]}"' not in update["html"]:
            tally.errors["pushed update without its turn"] += 1
        return True

    async def viewer(i: int) -> None:
        await asyncio.sleep(i * ramp_s / viewers)
        http, fetcher = Http("127.0.0.1", port), Http("127.0.0.1", port)
        last = first_index
        await load_page(http)
        ws = await open_ws()
        if ws:
            last = await fetch_updates(fetcher, last, None)
        arrived[0] += 1
        if arrived[0] == viewers:
            joined.set()
        notes: asyncio.Queue = asyncio.Queue()

        async def pump(sock: WsClient) -> None:
            try:
                while True:
                    await notes.put(await sock.recv())
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                pass

        reader = asyncio.ensure_future(pump(ws)) if ws else None
        next_reload = time.perf_counter() + random.uniform(8, 15)
        while not done.is_set():
            try:
                note = await asyncio.wait_for(notes.get(), 0.5)
            except TimeoutError:
                note = None
            if note and note.get("kind") == "turn.ready" and note["turn"] > first_index:
                tally.notify_at.append((note["turn"], time.perf_counter()))
                if pushed(note, last):
                    tally.pushed += 1
                    last = max(last, note["update"]["last_index"])
                else:
                    tally.fetched += 1
                    last = await fetch_updates(fetcher, last, note["turn"])
                tally.browser_at.append((note["turn"], time.perf_counter()))
            if time.perf_counter() >= next_reload:  # a reload: the socket goes, the page and a new socket come
                next_reload = time.perf_counter() + random.uniform(8, 15)
                if reader:
                    reader.cancel()
                    ws.close()
                await load_page(http)
                ws = await open_ws()
                if ws:
                    last = await fetch_updates(fetcher, last, None)
                reader = asyncio.ensure_future(pump(ws)) if ws else None
        if reader:
            reader.cancel()
            ws.close()
        http.close()
        fetcher.close()

    async def main() -> None:
        await asyncio.gather(*(viewer(i) for i in range(viewers)), return_exceptions=False)

    def run_loop() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(main())
        except Exception as exc:  # reported with the numbers
            tally.errors[f"client {type(exc).__name__}: {exc}"] += 1
        finally:
            joined.set()

    storer = Storer(job.pk, first_index, turns)
    thread = threading.Thread(target=run_loop, daemon=True)
    thread.start()
    joined.wait(ramp_s + 60)
    time.sleep(1.0)
    sent, tally.announce = storer.run()
    time.sleep(3.0)
    done.set()
    thread.join(60)
    tally.notify = [(t - sent[turn]) * 1000 for turn, t in tally.notify_at if turn in sent]
    tally.browser = [(t - sent[turn]) * 1000 for turn, t in tally.browser_at if turn in sent]
    return report_viewers(tally, viewers, web, fetch_always)


class Storer:
    """The worker that stores the turns: a process of its own, as a Celery worker is (storing in
    this process would make its share of the work wait behind the viewers' client for the GIL).
    Its commit times are perf_counter() readings, which are CLOCK_MONOTONIC: one clock for every
    process of the host."""

    def __init__(self, job_id: int, first_index: int, turns: int) -> None:
        import multiprocessing

        self.conn, child = multiprocessing.Pipe()
        self.proc = multiprocessing.get_context("spawn").Process(
            target=store_turns, args=(job_id, first_index, turns, child), daemon=True
        )
        self.proc.start()  # Django starts there while the viewers arrive

    def run(self) -> tuple[dict[int, float], list[float]]:
        """Store the turns now: (commit time per turn, ms from commit to its notices handed to Redis)."""
        if not self.conn.poll(120) or self.conn.recv() != "ready":
            raise RuntimeError("the storing process did not start")
        self.conn.send("go")
        sent, announced = self.conn.recv()
        self.proc.join(30)
        return sent, announced


def store_turns(job_id: int, first_index: int, turns: int, conn) -> None:
    """A turn a second, two progress steps between turns, as a run stores them. Sends back each
    turn's commit time (the on_commit callback registered first runs first) and the ms from the
    commit to every notice of the turn handed to Redis (every callback after it done)."""
    import django

    django.setup()
    from django.db import transaction
    from django.template.loader import get_template

    from webapp.jobs import charts, services
    from webapp.jobs.models import Job
    from webapp.jobs.sample_trajectory import build
    from webapp.jobs.turn_html import turns_html
    from webapp.jobs.turns import group_by_turn

    job = Job.objects.get(pk=job_id)
    events = group_by_turn(build(turns=first_index + turns)["events"])
    sent: dict[int, float] = {}
    announced = []
    # warm, as a worker is after its first turn: imports, compiled templates, the cache's and the
    # channel layer's connections
    for name in ("jobs/_turn.html", "jobs/_diff.html"):
        get_template(name)
    turns_html(job.turns.order_by("index"))
    charts.job_charts(job, list(job.turns.order_by("index")))
    services.set_step(job.pk, "timing")
    conn.send("ready")
    conn.recv()
    for index in range(first_index + 1, first_index + turns + 1):
        with transaction.atomic():
            transaction.on_commit(lambda index=index: sent.__setitem__(index, time.perf_counter()))
            services.store_turn(job, index, events[index])
        announced.append((time.perf_counter() - sent[index]) * 1000)
        time.sleep(0.33)
        services.set_step(job.pk, "checking correctness 3/5")
        time.sleep(0.33)
        services.set_step(job.pk, "timing")
        time.sleep(0.34)
    conn.send((sent, announced))


def report_viewers(tally: Tally, viewers: int, web: int, fetch_always: bool) -> dict:
    def line(name: str, ms: list[float]) -> str:
        return summary(name, ms) if ms else f"{name}: none"

    mode = "every notice followed by a fetch" if fetch_always else "turns shown from the notice when they follow"
    print(
        f"viewers={viewers} ({web} web process(es), {os.cpu_count()} CPUs shared with Redis, the clients and other users; {mode}):"
    )
    print("  " + line("page (first loads and reloads)", tally.page))
    print(
        f"  websockets: {tally.ws_ok} connected of {tally.ws_ok + tally.ws_failed()} attempts; "
        + line("handshake", tally.ws)
    )
    print("  " + line("turn stored -> all its notices handed to Redis (storing process)", tally.announce))
    print("  " + line("turn stored -> websocket notification", tally.notify))
    print("  " + line("turn stored -> browser (turn shown)", tally.browser))
    print(f"  turns shown from the notice: {tally.pushed}; after a fetch: {tally.fetched}")
    print("  " + line("fetch after a notice (request -> answer)", tally.fetch))
    print("  " + line("catch-up fetch after each (re)connect", tally.catch_up))
    print(f"  update answers from the viewer cache: {tally.cached} of {len(tally.fetch) + len(tally.catch_up)}")
    print(f"  errors: {dict(tally.errors) if tally.errors else 'none'}")
    result = {
        "viewers": viewers,
        "page_p95": percentile(tally.page, 0.95) if tally.page else None,
        "browser_p95": percentile(tally.browser, 0.95) if tally.browser else None,
        "errors": sum(tally.errors.values()),
        "ws_failed": tally.ws_failed(),
    }
    if viewers <= 50:
        verdict = [
            ("page p95 <= 300 ms", result["page_p95"] is not None and result["page_p95"] <= 300),
            (
                "turn stored -> browser p95 <= 250 ms",
                result["browser_p95"] is not None and result["browser_p95"] <= 250,
            ),
            ("every websocket connected", result["ws_failed"] == 0),
        ]
    else:
        verdict = [("no errors", result["errors"] == 0)]
    print("  targets: " + "; ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in verdict))
    return result


def live_job(turns: int):
    """A public running job with `turns` stored turns (what viewers watch)."""
    from webapp.jobs import services
    from webapp.jobs.models import Job
    from webapp.jobs.sample_trajectory import SOFTMAX_TASK, build
    from webapp.jobs.turns import group_by_turn

    job = services.create_job(None, "bench", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False)
    Job.objects.filter(pk=job.pk).update(visibility=Job.Visibility.PUBLIC)
    services.start_job(job)
    for index, events in group_by_turn(build(turns=turns)["events"]).items():
        if index <= turns:
            services.store_turn(job, index, [e for e in events if e.get("type") not in ("finished", "error")])
    return job


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
    print(
        f"job page with {turns} turns, HTML over HTTP, first view (daphne's cache cold): {(time.perf_counter() - t0) * 1000:.0f} ms, {len(body) / 1e6:.2f} MB"
    )
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
    print(
        f"job page with {turns} turns in Chromium, first navigation: load {loads[0]:.0f} ms, charts drawn {drawn[0]:.0f} ms"
    )
    loads, drawn, nav = loads[1:], drawn[1:], nav[1:]
    print(summary(f"job page with {turns} turns in Chromium, to the load event (Navigation Timing)", nav))
    print(summary(f"job page with {turns} turns in Chromium, goto() until every turn is in the page", loads))
    print(
        summary(f"job page with {turns} turns in Chromium, to the charts drawn (plotly.js loads after the page)", drawn)
    )
    print(
        f"  target: page loaded under 1 s -> {'met' if percentile(nav, 0.5) < 1000 else 'NOT met'} (median, load event)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--viewers", type=int, nargs="+", default=[50, 200], help="viewer counts, one run each")
    parser.add_argument("--web-processes", type=int, default=2)
    parser.add_argument("--ramp", type=float, default=5.0, help="seconds over which the viewers arrive")
    parser.add_argument("--turns", type=int, default=15, help="turns stored while they watch")
    parser.add_argument(
        "--fetch", action="store_true", help="viewers: fetch /updates/ after every notice (the older page)"
    )
    parser.add_argument("--sections", default="viewers", help="comma-separated: viewers, latency, idle, page")
    parser.add_argument("--clients", type=int, default=50, help="latency section: sockets")
    parser.add_argument("--idle", type=int, default=200, help="idle section: sockets")
    parser.add_argument("--hold", type=float, default=20.0, help="idle section: seconds the sockets stay connected")
    parser.add_argument("--page-turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--redis", default=os.environ.get("KERNELWRIGHT_BENCH_REDIS", "redis://127.0.0.1:6379/13"))
    args = parser.parse_args(argv)
    sections = {x.strip() for x in args.sections.split(",") if x.strip()}

    with tempfile.TemporaryDirectory(prefix="kw-bench-") as tmp:
        setup_django(Path(tmp) / "bench.sqlite3", args.redis)
        procs, port, sock = start_web(max(1, args.web_processes))
        try:
            print(f"web pids {[p.pid for p in procs]} on port {port}; redis {args.redis}; {os.cpu_count()} CPUs")
            if "viewers" in sections:
                for count in args.viewers:
                    bench_viewers(port, live_job(20), count, args.turns, args.ramp, 20, len(procs), args.fetch)
            if sections & {"latency", "idle"}:
                job = live_job(0)
                if "latency" in sections:
                    bench_latency(port, job, args.clients, 10, fetch_turns=False, first_index=0)
                    bench_latency(port, job, args.clients, 10, fetch_turns=True, first_index=10)
                if "idle" in sections:
                    bench_idle(port, procs[0].pid, job, args.idle, args.hold)
            if "page" in sections:
                bench_page(port, args.page_turns, args.repeat)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
            sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
