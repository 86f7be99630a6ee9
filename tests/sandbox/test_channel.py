"""Messages between the parent and a child (sandbox.channel): what arrives is what was sent,
and a hostile sender's malformed message is refused, never decoded into something else."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from sandbox import channel


def _pipe():
    """(receiving end, sending end) of a channel's socketpair."""
    return channel.socketpair()


def _message() -> dict:
    return {
        "big": torch.randn(600, 1000),
        "small": torch.arange(5),
        "nested": [(torch.ones(2, 3, dtype=torch.float16), "x")],
        "empty": torch.empty(0, 7),
        "n": 3,
        "none": None,
        "flag": True,
    }


def test_round_trip_keeps_structure_dtypes_and_bytes():
    r, w = _pipe()
    msg = _message()
    t = threading.Thread(target=channel.send, args=(w, msg))  # 2.4 MB: by memfd; the rest inline
    t.start()
    got = channel.recv(r, timeout=10, map=True)
    t.join()
    assert torch.equal(msg["big"], got["big"]) and torch.equal(msg["small"], got["small"])
    assert isinstance(got["nested"][0], tuple) and got["nested"][0][0].dtype == torch.float16
    assert got["empty"].shape == (0, 7) and got["n"] == 3 and got["none"] is None and got["flag"] is True


def test_non_contiguous_tensors_arrive_contiguous():
    r, w = _pipe()
    x = torch.arange(12.0).reshape(3, 4).t()
    channel.send(w, {"x": x})
    got = channel.recv(r, timeout=10)["x"]
    assert got.is_contiguous() and torch.equal(got, x)
    big = torch.arange(40000.0).reshape(200, 200).t()  # 160 KB: by memfd
    channel.send(w, {"x": big})
    got = channel.recv(r, timeout=10, map=True)["x"]
    x = big
    assert got.is_contiguous() and torch.equal(got, x)


def _raw(w: int, tree, payload: bytes = b"") -> None:
    header = json.dumps(tree).encode()
    w.sendall(len(header).to_bytes(channel.HEADER, "little") + header + payload)


@pytest.mark.parametrize(
    "spec,match",
    [
        ({"__tensor__": 0, "dtype": "object", "shape": [1]}, "dtype"),
        ({"__tensor__": 0, "dtype": "float32", "shape": [-1]}, "negative dimension"),
        ({"__tensor__": 3, "dtype": "float32", "shape": [1]}, "tensor indices"),
    ],
)
def test_malformed_tensor_specs_are_refused(spec, match):
    r, w = _pipe()
    _raw(w, {"__dict__": {"x": spec}}, b"\0" * 4)
    with pytest.raises(ValueError, match=match):
        channel.recv(r, timeout=10)


def test_sizes_beyond_the_limit_are_refused_before_allocating():
    r, w = _pipe()
    _raw(w, {"__dict__": {"x": {"__tensor__": 0, "dtype": "float32", "shape": [1 << 20, 1 << 20]}}})
    with pytest.raises(channel.MessageTooLarge):
        channel.recv(r, timeout=10, max_bytes=1 << 30)
    r, w = _pipe()
    w.sendall((100 << 20).to_bytes(channel.HEADER, "little"))
    with pytest.raises(channel.MessageTooLarge, match="header"):
        channel.recv(r, timeout=10)


def test_a_silent_sender_times_out_and_a_closed_one_is_reported():
    r, w = _pipe()
    with pytest.raises(channel.ChannelTimeout):
        channel.recv(r, timeout=0.2)
    w.sendall((10).to_bytes(channel.HEADER, "little") + b"{")
    w.close()
    with pytest.raises(channel.ChannelClosed):
        channel.recv(r, timeout=5)


def test_only_plain_data_can_be_sent():
    r, w = _pipe()
    with pytest.raises(TypeError, match="cannot send"):
        channel.send(w, {"f": object()})
    with pytest.raises(TypeError, match="keys must be strings"):
        channel.send(w, {1: 2})


# ---- what a receiver allocates is bounded by what an honest sender sends (red team parent_memory)


def _send_in_thread(w, data: bytes) -> threading.Thread:
    t = threading.Thread(target=lambda: w.sendall(data), daemon=True)
    t.start()
    return t


def test_an_inline_tensor_no_honest_sender_sends_is_refused_before_allocating():
    """A child wrote its own reply announcing one inline tensor: the parent (root, no limits)
    allocated and filled it, 2 GiB in the red team's run. Honest inline tensors are below
    SHARE_MIN bytes; anything larger goes by memfd."""
    r, w = _pipe()
    n = 1 << 20
    header = json.dumps({"__dict__": {"pad": {"__tensor__": 0, "dtype": "uint8", "shape": [n]}}}).encode()
    _send_in_thread(w, len(header).to_bytes(channel.HEADER, "little") + header + bytes(n))
    with pytest.raises(channel.MessageTooLarge, match="inline tensor"):
        channel.recv(r, timeout=10)


def test_small_inline_tensors_past_the_message_cap_are_refused():
    r, w = _pipe()
    each = channel.SHARE_MIN - 4
    count = channel.INLINE_MAX // each + 2
    tree = {"__dict__": {f"t{i}": {"__tensor__": i, "dtype": "uint8", "shape": [each]} for i in range(count)}}
    header = json.dumps(tree).encode()
    _send_in_thread(w, len(header).to_bytes(channel.HEADER, "little") + header + bytes(each * count))
    with pytest.raises(channel.MessageTooLarge, match="inline"):
        channel.recv(r, timeout=10)


def test_a_header_past_its_cap_is_refused_unread():
    r, w = _pipe()
    header = json.dumps({"__dict__": {"x": "y" * (channel.MAX_HEADER + 10)}}).encode()
    _send_in_thread(w, len(header).to_bytes(channel.HEADER, "little") + header)
    with pytest.raises(channel.MessageTooLarge, match="header"):
        channel.recv(r, timeout=10)


def test_an_honest_sender_never_passes_the_caps():
    """Many small tensors (a state_dict of small parameters, say): past INLINE_MAX in all, the
    rest goes by memfd, so the receiver's caps never refuse an honest message."""
    r, w = _pipe()
    msg = {f"p{i}": torch.full((10000,), float(i)) for i in range(3 * channel.INLINE_MAX // 40000)}  # 40 KB each
    sent, got_traffic = channel.Traffic(), channel.Traffic()
    t = threading.Thread(target=channel.send, args=(w, msg, sent))
    t.start()
    got = channel.recv(r, timeout=30, map=True, traffic=got_traffic)
    t.join()
    assert all(torch.equal(got[k], v) for k, v in msg.items())
    assert sent.socket_bytes <= channel.INLINE_MAX + channel.MAX_HEADER and sent.shared_bytes > 0
