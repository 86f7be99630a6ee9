"""A pre-forked "zygote": one process per evaluator that has imported torch and the harness
(but never initialised CUDA or started a thread pool), and forks a fresh child for every
reference/candidate process. A fork costs milliseconds; a cold `import torch` 1.5-3 s.

Each forked child applies exactly the isolation of isolation.Child (session, pids cgroup,
network namespace, rlimits, throwaway uid, scrubbed environment, its own folder) before any
user code runs. The zygote itself holds no secrets: it is started with the scrubbed
environment and receives only spawn requests (JSON) and the child's three pipe/log fds.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

MAX_MSG = 1 << 16


# ---- zygote process -------------------------------------------------------------------

def _child_main(req: dict, fds: list[int], sock: socket.socket) -> None:
    from .isolation import Limits, _preexec

    try:
        sock.close()
        import signal

        # as Popen(restore_signals=True): Python ignores these at startup, a child must not
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        p2c_r, c2p_w, log_fd = fds
        limits = Limits(**req["limits"])
        cgroup = Path(req["cgroup"]) if req.get("cgroup") else None
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        os.close(devnull)
        _preexec(limits, req.get("uid"), bool(req.get("netns")), cgroup)()
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        import tempfile

        # the zygote cached its own temp folder (/tmp): use the child's TMPDIR, its private
        # folder (inductor/triton temp and header-cache paths derive from it)
        tempfile.tempdir = None
        os.environ["KW_FD_IN"], os.environ["KW_FD_OUT"] = str(p2c_r), str(c2p_w)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        from . import worker

        worker.configure_from_env()
        sys.argv = ["sandbox.worker", req["role"]]
        worker.main()
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def serve(fd: int) -> None:
    """The zygote's loop: spawn requests, wait requests, nothing else."""
    import torch  # (the point of the zygote)

    native_threads = len(os.listdir("/proc/self/task"))  # torch's import starts a helper thread; forking after it is what DataLoader does too
    import torch.profiler  # noqa: F401
    import torch.utils._python_dispatch  # noqa: F401
    import torch.utils.flop_counter

    from . import audit, channel, harness, timing, worker  # noqa: F401

    # First use of a dispatch mode / the flop counter costs seconds of lazy imports; pay it
    # once here. Tensors this small never start a thread pool, so forking stays safe.
    with torch.no_grad(), audit.make_recorder():
        torch.empty(4).fill_(1.0).sum()
    with torch.utils.flop_counter.FlopCounterMode(display=False):
        torch.mm(torch.ones(2, 2), torch.ones(2, 2))
    if threading.active_count() != 1 or len(os.listdir("/proc/self/task")) != native_threads:
        print("[zygote] warning: warm-up started threads; forking may be unsafe", file=sys.stderr)

    sock = socket.socket(fileno=fd)
    exited: dict[int, int] = {}
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MSG, 4)
        except OSError:
            return
        if not data:
            return
        req = json.loads(data)
        reply: dict[str, Any] = {}
        if req["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                _child_main(req, fds, sock)
            for f in fds:
                os.close(f)
            reply = {"pid": pid}
        elif req["op"] == "wait":
            pid = req["pid"]
            deadline = time.monotonic() + float(req.get("timeout", 0))
            while pid not in exited:
                try:
                    got, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    exited[pid] = -9999
                    break
                if got == pid:
                    exited[pid] = os.waitstatus_to_exitcode(status)
                    break
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.005)
            reply = {"returncode": exited.pop(pid, None)}
        elif req["op"] == "ping":
            reply = {"pong": os.getpid()}
        # reap anything else that exited, so no zombie piles up
        while True:
            try:
                got, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if got == 0:
                break
            exited[got] = os.waitstatus_to_exitcode(status)
        sock.sendall(json.dumps(reply).encode())


# ---- parent side ------------------------------------------------------------------------

class ZygoteProcess:
    """What isolation.Child holds instead of a Popen when the zygote forked its process."""

    def __init__(self, client: ZygoteClient, pid: int):
        self.client, self.pid = client, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.client.wait(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.client.wait(self.pid, 3600 if timeout is None else timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired("zygote child", timeout)
        return self.returncode


class ZygoteClient:
    def __init__(self, env: dict[str, str]):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = parent
        self.lock = threading.Lock()
        self.owner = os.getpid()
        repo_root = str(Path(__file__).resolve().parent.parent)
        env = dict(env, PYTHONPATH=repo_root, KW_ZYGOTE_FD=str(child.fileno()))
        self.proc = subprocess.Popen([sys.executable, "-m", "sandbox.zygote"], env=env, pass_fds=(child.fileno(),),
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        child.close()

    def _call(self, req: dict, fds: list[int] = (), timeout: float = 120) -> dict:
        with self.lock:
            self.sock.settimeout(timeout)
            socket.send_fds(self.sock, [json.dumps(req).encode()], list(fds))
            data = self.sock.recv(MAX_MSG)
        if not data:
            raise ConnectionError("zygote closed")
        return json.loads(data)

    def alive(self) -> bool:
        return self.proc.poll() is None and self.owner == os.getpid()

    def spawn(self, req: dict, fds: list[int]) -> ZygoteProcess:
        reply = self._call(dict(req, op="spawn"), fds)
        return ZygoteProcess(self, int(reply["pid"]))

    def wait(self, pid: int, timeout: float) -> int | None:
        reply = self._call({"op": "wait", "pid": pid, "timeout": timeout}, timeout=timeout + 30)
        return reply.get("returncode")

    def ping(self) -> bool:
        try:
            return "pong" in self._call({"op": "ping"}, timeout=60)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


_client: ZygoteClient | None = None
_client_lock = threading.Lock()


def get_client(env: dict[str, str]) -> ZygoteClient | None:
    """The evaluator's zygote, started on first use (and again if it died or we forked)."""
    global _client
    if os.environ.get("KERNELWRIGHT_NO_ZYGOTE"):
        return None
    with _client_lock:
        if _client is None or not _client.alive():
            try:
                _client = ZygoteClient(env)
                if not _client.ping():
                    _client.close()
                    _client = None
            except OSError:
                _client = None
        return _client


def shutdown() -> None:
    global _client
    with _client_lock:
        if _client is not None:
            _client.close()
            _client = None


if __name__ == "__main__":
    serve(int(os.environ["KW_ZYGOTE_FD"]))
