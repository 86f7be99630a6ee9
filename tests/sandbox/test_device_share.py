"""Device tensors by exported CUDA allocation (sandbox.device_share): the values arrive, the
receiver works on a copy of its own, the parent forwards without CUDA, what a hostile sender
passes instead of an allocation is refused, nothing leaks, and a cuda evaluation's trial tensors
stay on the device. Run on the GPU host (`python3 -m pytest -m gpu tests/sandbox`)."""

from __future__ import annotations

import array
import json
import os
import re
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

from sandbox import channel, device_share, evaluate, shared
from sandbox.options import EvalOptions
from sandbox.workloads import linear_relu_candidate, linear_relu_task, softmax_candidate, softmax_task

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


@pytest.fixture(autouse=True)
def _share():
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    assert channel.share_device_tensors(), "the driver has no virtual memory API with POSIX descriptors"
    yield
    channel._DEVICE[0] = False


def test_a_device_tensor_arrives_as_a_private_copy_on_the_device():
    a, b = channel.socketpair()
    x = torch.randn(4096, 2049, device="cuda")  # several granules: the receiver maps the whole allocation
    y = torch.arange(1 << 15, device="cuda", dtype=torch.int64)
    sent = channel.Traffic()
    channel.send(b, {"x": x, "y": y}, sent)
    got = channel.recv(a, timeout=30, map=True)
    assert got["x"].is_cuda and torch.equal(got["x"], x) and torch.equal(got["y"], y)
    assert sent.device_bytes == x.numel() * 4 + y.numel() * 8 and sent.shared_bytes == 0 and sent.descriptors == 1
    got["x"].add_(1.0)  # the receiver's own memory: the sender's tensor is unchanged
    assert not torch.equal(got["x"], x) and got["x"].data_ptr() != x.data_ptr()


def test_the_parent_forwards_device_handles_without_cuda():
    """The parent's side runs in a process that never initialises CUDA."""
    ref_side, parent_from_ref = channel.socketpair()
    parent_to_cand, cand_side = channel.socketpair()
    code = textwrap.dedent("""
        import socket, sys
        from sandbox import channel, device_share
        a = socket.socket(fileno=int(sys.argv[1])); b = socket.socket(fileno=int(sys.argv[2]))
        msg = channel.recv(a, timeout=60)
        assert isinstance(msg["inputs"][0], device_share.DeviceHandle), msg
        import torch
        assert not torch.cuda.is_initialized()
        channel.send(b, msg)
        print("forwarded", flush=True)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(parent_from_ref.fileno()), str(parent_to_cand.fileno())],
        pass_fds=(parent_from_ref.fileno(), parent_to_cand.fileno()),
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    x = torch.randn(300, 300, device="cuda")
    channel.send(ref_side, {"inputs": [x]})
    got = channel.recv(cand_side, timeout=60, map=True)["inputs"][0]
    assert proc.wait(60) == 0 and "forwarded" in proc.stdout.read()
    assert torch.equal(got, x)


def _announce(sock, fd: int, nbytes: int) -> None:
    """A hand-made message announcing a float32 device tensor of `nbytes` in descriptor `fd`,
    an allocation of as many bytes."""
    tree = {
        "__dict__": {"x": {"dtype": "float32", "shape": [nbytes // 4], "__device__": 0, "offset": 0, "size": nbytes}}
    }
    header = json.dumps(tree).encode()
    sock.sendmsg(
        [len(header).to_bytes(channel.HEADER, "little") + header],
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))],
    )


def test_a_pipe_a_memfd_or_a_short_allocation_is_refused():
    a, b = channel.socketpair()
    r, _w = os.pipe()
    _announce(b, r, 1 << 16)
    with pytest.raises(shared.BadHandle, match="socket, pipe or file"):
        channel.recv(a, timeout=10)
    fd, _ = shared.pack([torch.ones(1 << 16)])  # a sealed memfd where an allocation is announced
    _announce(b, fd, 1 << 18)
    os.close(fd)
    with pytest.raises(shared.BadHandle, match="socket, pipe or file|not a CUDA allocation"):
        channel.recv(a, timeout=10, map=True)
    fd, _, size = device_share.export([torch.ones(1 << 16, device="cuda")])  # one granule (2 MB on current GPUs)
    _announce(b, fd, 64 << 20)
    os.close(fd)
    with pytest.raises(shared.BadHandle, match="does not hold"):
        channel.recv(a, timeout=10, map=True)
    fd, _, size = device_share.export([torch.ones(1 << 16, device="cuda")])
    tree = {"__dict__": {"x": {"dtype": "float32", "shape": [size // 2], "__device__": 0, "offset": 0, "size": size}}}
    header = json.dumps(tree).encode()  # a tensor larger than the allocation it claims to lie in
    b.sendmsg(
        [len(header).to_bytes(channel.HEADER, "little") + header],
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))],
    )
    os.close(fd)
    with pytest.raises(shared.BadHandle, match="does not hold"):
        channel.recv(a, timeout=10)


def test_exports_and_imports_leak_no_device_memory():
    a, b = channel.socketpair()
    x = torch.randn(8 << 20, device="cuda")  # 32 MB
    for _ in range(3):  # warm: the caching allocator holds the receivers' blocks from here on
        channel.send(b, {"x": x})
        del channel.recv(a, timeout=30, map=True)["x"]
    torch.cuda.synchronize()
    free0, _ = torch.cuda.mem_get_info()
    for _ in range(50):
        channel.send(b, {"x": x})
        del channel.recv(a, timeout=30, map=True)["x"]
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info()
    assert free0 - free1 < 64 << 20, f"{(free0 - free1) / 1e6:.0f} MB of device memory lost over 50 transfers"


def _traffic(res) -> tuple[float, float]:
    line = next(f for f in res.audit.findings if f.startswith("transport:"))
    m = re.search(r"([\d.]+) MB in sealed memfds and ([\d.]+) MB in device", line)
    return float(m.group(1)), float(m.group(2))


CASES = {
    "softmax": lambda: (softmax_task(1024, 1024), softmax_candidate(0, "cuda")),
    # several tensors of several granules in one message (inputs; the reinit trial's weights)
    "linear": lambda: (linear_relu_task(1024, 2048, 2048), linear_relu_candidate("cuda")),
}


@pytest.mark.parametrize("share", ["1", "0"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cuda_evaluation_keeps_its_trial_tensors_on_the_device(case, share, monkeypatch, cache_dir):
    monkeypatch.setenv("KERNELWRIGHT_DEVICE_SHARE", share)
    opts = EvalOptions(
        backend="cuda", compile_baseline=False, timing_budget_s=0.1, timing_rounds=3, cache_dir=cache_dir
    )
    res = evaluate(*CASES[case](), opts)
    assert res.status.value == "ok", res.reasons
    memfd_mb, device_mb = _traffic(res)
    if share == "1":
        assert device_mb > 40.0 and memfd_mb < 1.0, (memfd_mb, device_mb)
    else:
        assert device_mb == 0.0 and memfd_mb > 40.0, (memfd_mb, device_mb)
