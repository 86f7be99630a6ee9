"""Request bodies over their limit are refused before they are read (issue 20): a real web
server (webapp.core.server, what `./kw run` starts) answers 413 with a clear message from the
Content-Length header alone, or as soon as a chunked body passes the limit, and stops reading;
the client cannot push the rest. Under plain daphne the ASGI guard still refuses before Django.

The numbers printed (how long the refusal took, how much the client got to send) are for people;
what is asserted is that the server answered 413 having taken only a small part of the body."""

from __future__ import annotations

import json
import select
import socket
import sys
import time

import pytest

from tests.support.processes import ManagedProcess, free_port, wait_for

pytestmark = pytest.mark.slow
BIG = 50 * 1024 * 1024
CHUNK = b"x" * 65536


def start(tmp_path, redis_url: str, module: str) -> tuple[ManagedProcess, int]:
    import os

    port = free_port()
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "REDIS_URL": redis_url,
        "KERNELWRIGHT_BACKEND": "cpu",
        "PYTHONUNBUFFERED": "1",
    }
    proc = ManagedProcess.start(
        module,
        [sys.executable, "-m", module, "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"],
        env,
        tmp_path,
    )

    def answers() -> bool:
        if not proc.alive:
            raise RuntimeError(proc.log_tail())
        return (
            request(port, b"GET /api/openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")[0] == 200
        )

    wait_for(answers, 60, interval=0.3, what=module)
    return proc, port


def read_response(sock: socket.socket, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    data, deadline = b"", time.monotonic() + timeout
    while b"\r\n\r\n" not in data and time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)) and time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def request(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        return read_response(sock)


def push_body(port: int, head: bytes, chunked: bool = False) -> tuple[int, dict[str, str], bytes, int, float]:
    """Send the head, then up to BIG bytes of body as fast as the server takes them, watching for
    an answer; returns (status, headers, body, bytes of body sent, seconds to the answer)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(head)
        sock.setblocking(False)
        sent, t0 = 0, time.perf_counter()
        while sent < BIG and time.perf_counter() - t0 < 30:
            readable, writable, _ = select.select([sock], [sock], [], 1.0)
            if readable:
                break
            if writable:
                piece = (b"10000\r\n" + CHUNK + b"\r\n") if chunked else CHUNK
                try:
                    sent += sock.send(piece) if not chunked else (sock.sendall(piece) or len(CHUNK))
                except (BlockingIOError, InterruptedError):
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    break
        elapsed = time.perf_counter() - t0
        sock.setblocking(True)
        sock.settimeout(10)
        status, headers, body = read_response(sock)
        return status, headers, body, sent, elapsed
    finally:
        sock.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, redis_url):
    proc, port = start(tmp_path_factory.mktemp("web"), redis_url, "webapp.core.server")
    yield port
    proc.stop()


def test_a_50_mb_upload_is_refused_from_its_length_without_being_read(server) -> None:
    head = (
        f"POST /jobs/new/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=x\r\n"
        f"Content-Length: {BIG}\r\n\r\n"
    ).encode()
    status, headers, body, sent, elapsed = push_body(server, head)
    print(f"50 MB POST /jobs/new/: 413 after {elapsed * 1000:.0f} ms, {sent / 1e6:.1f} MB of the body sent")
    assert status == 413
    assert headers["connection"] == "close"
    assert "a new job may be at most 1048576 bytes" in body.decode() and f"this one is {BIG} bytes" in body.decode()
    assert sent < BIG // 4  # the server stopped reading: most of the body never left the client


def test_expect_100_continue_gets_the_refusal_instead_of_continue(server) -> None:
    head = (
        f"POST /jobs/import/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {BIG}\r\nExpect: 100-continue\r\n\r\n"
    ).encode()
    status, _, body = request(server, head)
    assert status == 413  # not 100: not a byte of the body is asked for
    assert "a trajectory import may be at most" in body.decode()


def test_a_chunked_body_is_refused_once_it_passes_the_limit(server) -> None:
    head = b"POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    status, headers, body, sent, elapsed = push_body(server, head, chunked=True)
    print(f"chunked POST /api/jobs: 413 after {elapsed * 1000:.0f} ms, {sent / 1e6:.1f} MB sent")
    assert status == 413 and headers["content-type"] == "application/json"
    assert json.loads(body)["limit_bytes"] == 1024 * 1024
    assert sent < BIG // 4


def test_a_body_under_the_limit_reaches_the_view_and_the_server_goes_on(server) -> None:
    payload = json.dumps({"name": "x", "source": "y" * 1000}).encode()
    status, _, body = request(
        server,
        b"POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
        + payload,
    )
    assert status == 401 and "authentication required" in json.loads(body)["error"]  # the view answered


def test_under_plain_daphne_the_asgi_guard_refuses_before_django(tmp_path, redis_url) -> None:
    proc, port = start(tmp_path, redis_url, "daphne")
    try:
        payload = b"x" * (2 * 1024 * 1024)
        status, _, body = request(
            port,
            b"POST /jobs/check/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
            + payload,
        )
        assert status == 413 and "a task check may be at most 1048576 bytes" in body.decode()
    finally:
        proc.stop()
