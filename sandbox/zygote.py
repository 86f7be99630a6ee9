"""A pre-forked "zygote": one process per evaluator that has imported torch and the harness
(but never initialised CUDA or started a thread pool), and forks a fresh child for every
reference/candidate process. A fork costs milliseconds; a cold `import torch` 1.5-3 s.

Contained (the default), the zygote runs inside a bubblewrap sandbox of its own
(sandbox.containment: no network, no capabilities, a non-root uid, only the runtime and a
folder of children's folders) and each forked child takes namespaces of its own inside it
(containment.isolate_forked_child) before any user code runs: it sees neither the zygote nor
its siblings. Uncontained (KERNELWRIGHT_UNCONTAINED=1), a child applies limits.hardening.
The zygote holds no secrets: it is started with the scrubbed environment and receives only
spawn, wait and signal requests (JSON) and the child's fds: its end of the channel's socketpair
(twice: KW_FD_IN, KW_FD_OUT) and its log.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import containment

MAX_MSG = 1 << 16


# ---- zygote process -------------------------------------------------------------------


def _child_main(req: dict, fds: list[int], sock: socket.socket) -> None:
    from .limits import Limits, hardening

    try:
        sock.close()
        # as Popen(restore_signals=True): Python ignores these at startup, a child must not
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        p2c_r, c2p_w, log_fd = fds
        limits = Limits(**req["limits"])
        if req.get("job_dir"):
            from .containment import isolate_forked_child

            isolate_forked_child(req["job_dir"], limits, log_fd)
        cgroup = Path(req["cgroup"]) if req.get("cgroup") else None
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        os.close(devnull)
        hardening(limits, req.get("uid"), bool(req.get("netns")), cgroup)()
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

    native_threads = len(
        os.listdir("/proc/self/task")
    )  # torch's import starts a helper thread; forking after it is what DataLoader does too
    import torch.profiler
    import torch.utils._python_dispatch
    import torch.utils.flop_counter

    from . import audit, channel, harness, timing, worker  # noqa: F401
    from .containment import runtime_paths

    runtime_paths()  # what each child's private /tmp keeps, worked out once before any fork

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
    dying: dict[int, list[int]] = {}  # a killed child -> the processes below it when it was killed
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
            while True:
                if pid not in exited:
                    try:
                        got, status = os.waitpid(pid, os.WNOHANG)
                        if got == pid:
                            exited[pid] = os.waitstatus_to_exitcode(status)
                    except ChildProcessError:
                        exited[pid] = -9999
                ended = pid in exited and not _any_alive(dying.get(pid, []))
                if ended or time.monotonic() >= deadline:
                    break
                time.sleep(0.005)
            reply = {"returncode": exited.pop(pid, None) if ended else None}
            if ended:
                dying.pop(pid, None)
        elif req["op"] == "signal":
            pid, sig = int(req["pid"]), int(req["sig"])
            below = _descendants(pid)
            if sig == 9:
                dying[pid] = dying.get(pid, []) + below
            reply = {"signalled": _signal_tree(pid, below, sig)}
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


def _signal_tree(root: int, below: list[int], sig: int) -> int:
    """Signal a forked child and every process below it (`_descendants`: its namespace's
    included, this /proc shows them all). SIGKILL goes to each of them too: the namespace would
    die with the root, but only after the root had been reaped."""
    targets = [root, *below]
    sent = 0
    for pid in targets:
        try:
            os.kill(pid, sig)
            sent += 1
        except OSError:
            pass
    return sent


def _any_alive(pids: list[int]) -> bool:
    """Whether any of these processes has not yet exited (a zombie has: its memory, and its
    device memory, are freed before it becomes one). A killed child's worker is two levels
    below it, in its own PID namespace, and dies after the child has been reaped: a parent that
    took the reaping for the end gave the device memory share back while the worker still held
    40 GiB of it (the next evaluation ran out of memory, H100, 2026-12-06)."""
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                return True
        except (OSError, IndexError):
            pass
    return False


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


# ---- parent side ------------------------------------------------------------------------


class ZygoteProcess:
    """What isolation.Child holds instead of a Popen when the zygote forked its process.

    Never raises for a zygote that is gone or whose connection broke: its children die with it
    (containment.isolate_forked_child: PR_SET_PDEATHSIG), so the child counts as killed
    (SIGKILL), and `lost` says why, for the result (isolation.Child.exit_description)."""

    def __init__(self, client: ZygoteClient, pid: int):
        self.client, self.pid = client, pid
        self.returncode: int | None = None
        self.lost: str | None = None

    def _wait(self, timeout: float) -> int | None:
        try:
            return self.client.wait(self.pid, timeout)
        except (OSError, ValueError):
            self.lost = self.client.lost or "its connection to the zygote broke"
            return -9

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._wait(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._wait(3600 if timeout is None else timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired("zygote child", 3600 if timeout is None else timeout)
        return self.returncode


class ContainedZygoteProcess(ZygoteProcess):
    """A child of a contained zygote: its pid means something only to the zygote, which
    therefore also delivers its signals."""

    def signal_tree(self, sig: int) -> bool:
        """Whether the signal reached the child's processes (False: the zygote, which sends it,
        is gone or unreachable; the child may still run)."""
        if self.returncode is None and self.client.alive():
            try:
                self.client.signal(self.pid, sig)
                return True
            except (OSError, ValueError):
                self.lost = self.client.lost
        return False


_launcher: tuple[int, queue.SimpleQueue] | None = None
_launcher_lock = threading.Lock()


def _launch(start: Any) -> Any:
    """`start()` (which starts the zygote's process) run on a thread that lives as long as this
    process. bubblewrap's --die-with-parent is PR_SET_PDEATHSIG, and the kernel's "parent" there
    is the *thread* that forked it: a zygote started by an evaluation's own thread was SIGKILLed
    when that thread ended, with every child of the other evaluations that shared it (their
    sockets broke mid-run: BrokenPipeError out of evaluate)."""
    global _launcher
    with _launcher_lock:
        if _launcher is None or _launcher[0] != os.getpid():  # (none yet, or we forked: it is gone)
            jobs: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=_launcher_loop, args=(jobs,), name="kw-zygote-launcher", daemon=True).start()
            _launcher = (os.getpid(), jobs)
        jobs = _launcher[1]
    box: dict[str, Any] = {}
    done = threading.Event()
    jobs.put((start, box, done))
    done.wait()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _launcher_loop(jobs: queue.SimpleQueue) -> None:
    while True:
        start, box, done = jobs.get()
        try:
            box["value"] = start()
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()
            del start, box, done


class ZygoteClient:
    def __init__(self, env: dict[str, str], gpu: bool = False, contained: bool = True):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = parent
        self.lock = threading.Lock()
        self.owner = os.getpid()
        self.lost: str | None = None  # why the connection is no longer usable (then never used again)
        self.contained = contained
        self.host_uid: int | None = None
        self.jobs_dir: str | None = None
        env = dict(env, PYTHONPATH=str(containment.REPO_ROOT), KW_ZYGOTE_FD=str(child.fileno()))
        argv = [sys.executable, "-m", "sandbox.zygote"]
        try:
            if contained:
                self.proc = _launch(lambda: self._start_contained(argv, env, child.fileno(), gpu))
            else:
                self.proc = _launch(
                    lambda: subprocess.Popen(
                        argv, env=env, pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, start_new_session=True
                    )
                )
        finally:
            child.close()

    def _start_contained(self, argv: list[str], env: dict[str, str], sock_fd: int, gpu: bool) -> subprocess.Popen:
        self.host_uid = containment.host_uid_for_sandbox()
        self.jobs_dir = tempfile.mkdtemp(prefix="kw-jobs-")
        if self.host_uid is not None:
            os.chown(self.jobs_dir, self.host_uid, self.host_uid)
        filt = containment.seccomp_fd(allow_namespaces=True)
        try:
            args = (
                containment.bwrap_args(
                    [(self.jobs_dir, containment.INSIDE_JOBS)], gpu=gpu, seccomp_fd=filt, zygote=True
                )
                + argv
            )
            plan = containment.reachable_view(containment.sources_of(args), self.host_uid) if self.host_uid else []
            return subprocess.Popen(
                args,
                env=env,
                pass_fds=(sock_fd, filt),
                stdin=subprocess.DEVNULL,
                preexec_fn=containment.preexec(self.host_uid, plan, os.setsid),
            )
        finally:
            os.close(filt)

    def _call(self, req: dict, fds: Sequence[int] = (), timeout: float = 120) -> dict:
        """One request and its reply. Any failure (the zygote gone, no reply in time, a reply
        that is not JSON) makes the connection unusable: a late reply would answer the next
        request. The socket is closed (the zygote sees EOF and ends, its children with it),
        `lost` says why, and this and every later call raise OSError."""
        with self.lock:
            if self.lost is not None:
                raise ConnectionError(self.lost)
            try:
                self.sock.settimeout(timeout)
                socket.send_fds(self.sock, [json.dumps(req).encode()], list(fds))
                data = self.sock.recv(MAX_MSG)
                if not data:
                    raise ConnectionError("the zygote closed its connection")
                return json.loads(data)
            except (OSError, ValueError) as exc:
                self._lose(req.get("op"), exc)
                raise ConnectionError(self.lost) from exc

    def _lose(self, op: Any, exc: BaseException) -> None:
        rc = self.proc.poll()
        if rc is None:
            try:
                rc = self.proc.wait(timeout=0.2)  # a zygote that was just killed, still being reaped
            except subprocess.TimeoutExpired:
                pass
        what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if rc is None:
            state = "it is still running (its connection is now closed)"
        elif rc < 0:
            try:
                state = f"it was killed by {signal.Signals(-rc).name}"
            except ValueError:
                state = f"it was killed by signal {-rc}"
        else:
            state = f"it exited with code {rc}"
        self.lost = f"the sandbox's zygote (pid {self.proc.pid}) failed a {op!s} request ({what}); {state}"
        try:
            self.sock.close()
        except OSError:
            pass

    def alive(self) -> bool:
        return self.lost is None and self.proc.poll() is None and self.owner == os.getpid()

    def spawn(self, req: dict, fds: list[int]) -> ZygoteProcess:
        reply = self._call(dict(req, op="spawn"), fds)
        return (ContainedZygoteProcess if self.contained else ZygoteProcess)(self, int(reply["pid"]))

    def signal(self, pid: int, sig: int) -> None:
        self._call({"op": "signal", "pid": pid, "sig": int(sig)}, timeout=30)

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
                try:
                    os.killpg(self.proc.pid, 9)
                except OSError:
                    self.proc.kill()
                self.proc.wait()
            if self.jobs_dir:
                shutil.rmtree(self.jobs_dir, ignore_errors=True)


_clients: dict[tuple[bool, bool], ZygoteClient] = {}
_client_lock = threading.Lock()


def get_client(env: dict[str, str], gpu: bool = False, contained: bool = True) -> ZygoteClient | None:
    """The evaluator's zygote for this backend and containment, started on first use (and
    again if it died or we forked)."""
    if os.environ.get("KERNELWRIGHT_NO_ZYGOTE"):
        return None
    key = (gpu, contained)
    with _client_lock:
        client = _clients.get(key)
        if client is None or not client.alive():
            if client is not None:
                client.close()
            try:
                client = ZygoteClient(env, gpu, contained)
                if not client.ping():
                    client.close()
                    client = None
            except OSError:
                client = None
            if client is None:
                _clients.pop(key, None)
            else:
                _clients[key] = client
        return client


def shutdown() -> None:
    with _client_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


if __name__ == "__main__":
    serve(int(os.environ["KW_ZYGOTE_FD"]))
