"""Tensors by sealed memfd (sandbox.shared, sandbox.channel): what a receiver maps cannot change,
what a hostile sender passes instead of a sealed memfd is refused, the parent forwards without
mapping, and an evaluation's socket traffic no longer grows with its tensors."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from sandbox import channel, evaluate, shared
from sandbox.options import EvalOptions
from sandbox.workloads import softmax_candidate, softmax_task


def test_a_large_tensor_goes_by_descriptor_and_arrives_read_only():
    a, b = channel.socketpair()
    x = torch.randn(512, 512)
    sent = channel.Traffic()
    channel.send(b, {"x": x}, sent)
    got = channel.recv(a, timeout=10, map=True)["x"]
    assert torch.equal(got, x)
    assert sent.descriptors == 1 and sent.shared_bytes == x.numel() * 4 and sent.socket_bytes < 1000
    assert shared.is_mapped_read_only(got)


def test_the_parent_forwards_handles_without_mapping_them():
    ref_side, parent_from_ref = channel.socketpair()
    parent_to_cand, cand_side = channel.socketpair()
    x = torch.randn(300, 300)
    channel.send(ref_side, {"inputs": [x]})
    msg = channel.recv(parent_from_ref, timeout=10)  # the parent's view: a handle, never mapped
    handle = msg["inputs"][0]
    assert isinstance(handle, shared.Handle)
    channel.send(parent_to_cand, msg)
    got = channel.recv(cand_side, timeout=10, map=True)["inputs"][0]
    assert torch.equal(got, x)


def _send_fd(sock, fd: int, nbytes: int, kind: str = "__shared__") -> None:
    """A hand-made message announcing a float32 tensor of `nbytes` in descriptor `fd`."""
    import array
    import json
    import socket

    tree = {"__dict__": {"x": {"dtype": "float32", "shape": [nbytes // 4], kind: 0, "offset": 0, "size": nbytes}}}
    header = json.dumps(tree).encode()
    sock.sendmsg(
        [len(header).to_bytes(channel.HEADER, "little") + header],
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))],
    )


def test_an_unsealed_memfd_a_pipe_or_a_short_memfd_is_refused():
    a, b = channel.socketpair()
    unsealed = os.memfd_create("x", os.MFD_ALLOW_SEALING)
    os.ftruncate(unsealed, 1 << 16)
    _send_fd(b, unsealed, 1 << 16)
    with pytest.raises(shared.BadHandle, match="not sealed"):
        channel.recv(a, timeout=10)
    r, _w = os.pipe()
    _send_fd(b, r, 1 << 16)
    with pytest.raises(shared.BadHandle, match="not a memfd"):
        channel.recv(a, timeout=10)
    fcntl.fcntl(unsealed, fcntl.F_ADD_SEALS, shared.SEALS)
    _send_fd(b, unsealed, 1 << 20)
    with pytest.raises(shared.BadHandle, match="does not hold"):
        channel.recv(a, timeout=10)


def test_a_pipe_or_a_memfd_announced_as_a_device_allocation_is_refused_without_cuda():
    """The parent has no CUDA: its check of a device descriptor refuses what is plainly not one."""
    a, b = channel.socketpair()
    r, _w = os.pipe()
    _send_fd(b, r, 1 << 16, "__device__")
    with pytest.raises(shared.BadHandle, match="socket, pipe or file"):
        channel.recv(a, timeout=10)
    fd, _ = shared.pack([torch.ones(1 << 16)])
    _send_fd(b, fd, 1 << 18, "__device__")
    with pytest.raises(shared.BadHandle, match="socket, pipe or file"):
        channel.recv(a, timeout=10)
    os.close(fd)


def test_a_sealed_memfd_cannot_be_written_or_remapped_writable():
    fd, _ = shared.pack([torch.ones(1 << 16)])
    with pytest.raises(PermissionError):
        os.pwrite(fd, b"x", 0)
    import mmap

    with pytest.raises(PermissionError):
        mmap.mmap(fd, 1 << 18, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    os.close(fd)


def test_writing_to_a_mapped_input_faults():
    """In a separate process: the write must kill it with SIGSEGV, not change the bytes."""
    code = textwrap.dedent("""
        import torch
        from sandbox import channel
        a, b = channel.socketpair()
        channel.send(b, {"x": torch.zeros(1 << 16)})
        x = channel.recv(a, timeout=10, map=True)["x"]
        print("mapped", flush=True)
        x.add_(1.0)
        print("wrote", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "mapped" in proc.stdout and "wrote" not in proc.stdout
    assert proc.returncode == -11  # SIGSEGV


def test_task_too_large_for_the_host_is_a_clear_error():
    with pytest.raises(shared.TooLarge, match=r"task too large for this host: .* needs .* GB, limit .* GB"):
        shared.require_host(1 << 62, "one trial")


def _traffic(res) -> tuple[float, float, float]:
    """(MB through the sockets, MB in sealed memfds, MB in device allocations) of the finding."""
    line = next(f for f in res.audit.findings if f.startswith("transport:"))
    m = re.search(r"([\d.]+) MB through the sockets, ([\d.]+) MB in sealed memfds and ([\d.]+) MB in device", line)
    return float(m.group(1)), float(m.group(2)), float(m.group(3))


def test_socket_bytes_per_evaluation_stay_small_whatever_the_tensor_size():
    """1024x1024 fp32 (4 MB tensors; about 20 of them per evaluation went through the pipes,
    ~80 MB): now the tensors are handed on by descriptor and the sockets carry kilobytes."""
    opts = EvalOptions(backend="cpu", cpu_threads=1, timing_budget_s=0.1, timing_rounds=3, compile_baseline=False)
    res = evaluate(softmax_task(1024, 1024), softmax_candidate(0, "cpu"), opts)
    assert res.status.value == "ok", res.reasons
    through, handed, on_device = _traffic(res)
    assert through < 1.0 and handed > 40.0 and on_device == 0.0


def test_a_child_under_a_file_size_limit_sends_tensors_larger_than_it_in_a_memfd_of_the_parent():
    """Sizing a memfd is a file-size change (RLIMIT_FSIZE, the children's output_limit_mb): the
    child asks the parent for the memfd and only writes into its pages."""
    parent, child = channel.socketpair()
    code = textwrap.dedent(f"""
        import resource, socket, torch
        from sandbox import channel
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        sock = socket.socket(fileno={child.fileno()})
        inbox = []
        channel.send(sock, {{"x": torch.ones(1 << 20)}}, alloc=lambda n: channel.request_memfd(sock, n, inbox))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(child.fileno(),))
    child.close()
    got = channel.recv(parent, timeout=60, map=True, serve_alloc=True)["x"]
    assert proc.wait(timeout=60) == 0
    assert got.shape == (1 << 20,) and bool((got == 1).all())


def test_the_seccomp_filter_leaves_the_transport_its_system_calls():
    """The children run under sandbox.seccomp's denylist; the transport needs these."""
    from sandbox import seccomp

    needed = {"memfd_create", "ftruncate", "fcntl", "mmap", "munmap", "sendmsg", "recvmsg", "socketpair"}
    assert not needed & set(seccomp.DENIED)


def test_outputs_larger_than_the_references_are_not_passed_on():
    """The reference maps (and populates) what a candidate's descriptors announce; the parent
    refuses outputs that hold more bytes than the expected ones before forwarding them."""
    from sandbox.protocol import _bound_outputs

    a, b = channel.socketpair()
    channel.send(b, {"outputs": [torch.zeros(1 << 18)]})
    got = channel.recv(a, timeout=10) | {"checks": []}
    _bound_outputs(got, expected_bytes=(1 << 18) * 4)
    assert isinstance(got["outputs"][0], shared.Handle) and not got["checks"]
    _bound_outputs(got, expected_bytes=1000)
    assert got["outputs"] == [None] and "hold 1048576 bytes, the reference's 1000" in got["checks"][0][1]
