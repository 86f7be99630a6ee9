"""Would 3xTF32 pay on convolutions? Each convolution of KernelBench problems, measured on the GPU.

    python -m benchmarks.conv3x_probe --kernelbench DIR --problems 1/54 2/7 3/11 --out conv3x.json

Why: the 3xTF32 GEMM (agent/builtin/tf32x3.py) keeps float32's accuracy at tensor-core speed;
a convolution is a GEMM of depth K = C_in/groups * prod(kernel), so the same split applies with
the thirds stacked along the input channels: conv([xl | xh | xh], [wh | wl | wh]) =
xl*wh + xh*wl + xh*wh in one TF32 convolution of three times the channels (cuDNN, allow_tf32).
Before the generator emits it, this probe answers, per convolution as the problem calls it (its
input caught by a forward pre-hook): its worst error against float64 in the sandbox's tolerance
units (1e-4 + 1e-4 |exact|) on the problem's own inputs and on the sandbox's wide trial
(Student-t, 3 dof), for float32 (the reference), one TF32 convolution, and 3xTF32 (unchunked,
and in chunks of input channels with K <= CHUNK each, summed in float32); and the times of
float32 and of the stacked TF32 convolution (weights split once, as a kept weight would be), the
input's split in torch ops beside it. The sum over a problem's convolutions against its eager
forward says what a candidate could gain. Plain torch: runs on the device image.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

CHUNK = 1024
CONVS = (
    torch.nn.Conv1d,
    torch.nn.Conv2d,
    torch.nn.Conv3d,
    torch.nn.ConvTranspose1d,
    torch.nn.ConvTranspose2d,
    torch.nn.ConvTranspose3d,
)


def tf32_round(x: torch.Tensor) -> torch.Tensor:
    """x rounded to TF32's 10 mantissa bits (nearest, ties away), as the .cu's kw_tf32_round."""
    return ((x.view(torch.int32) + 0x1000) & -8192).view(torch.float32)


def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    hi = tf32_round(x)
    return hi, tf32_round(x - hi)


def thirds(x: torch.Tensor) -> list[torch.Tensor]:
    hi, lo = split(x)
    return [lo, hi, hi]


def stack(parts: list[torch.Tensor], groups: int, dim: int) -> torch.Tensor:
    """parts concatenated along `dim` within each of `groups` groups of that dim."""
    shape = list(parts[0].shape)
    c = shape[dim]
    split_shape = shape[:dim] + [groups, c // groups] + shape[dim + 1 :]
    cat = torch.cat([p.reshape(split_shape) for p in parts], dim=dim + 1)
    return cat.reshape(shape[:dim] + [3 * c] + shape[dim + 1 :])


def conv_call(m: torch.nn.Module, x: torch.Tensor, w: torch.Tensor, tf32: bool, bench: bool = False) -> torch.Tensor:
    """m's convolution of x by w without bias, through cuDNN with TF32 allowed or not."""
    pad = list(m.padding) if not isinstance(m.padding, str) else None
    if pad is None or m.padding_mode != "zeros":
        raise ValueError("padding mode")
    if isinstance(m, torch.nn.modules.conv._ConvTransposeNd):
        return torch.cudnn_convolution_transpose(
            x, w, pad, list(m.output_padding), list(m.stride), list(m.dilation), m.groups, bench, False, tf32
        )
    return torch.cudnn_convolution(x, w, pad, list(m.stride), list(m.dilation), m.groups, bench, False, tf32)


def conv3(m: torch.nn.Module, x: torch.Tensor, w3: torch.Tensor, bench: bool = False) -> torch.Tensor:
    xh, xl = split(x)
    return conv_call(m, stack([xl, xh, xh], m.groups, 1), w3, True, bench)


def weight3(m: torch.nn.Module, w: torch.Tensor) -> torch.Tensor:
    wh, wl = split(w)
    transposed = isinstance(m, torch.nn.modules.conv._ConvTransposeNd)
    return stack([wh, wl, wh], m.groups if transposed else 1, 0 if transposed else 1)


def chunked3(m: torch.nn.Module, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """3xTF32 over chunks of input channels (K <= CHUNK each, groups == 1), summed in float32."""
    transposed = isinstance(m, torch.nn.modules.conv._ConvTransposeNd)
    cin = x.shape[1]
    per = max(1, CHUNK // math.prod(m.kernel_size))
    out = None
    for c0 in range(0, cin, per):
        xs = x[:, c0 : c0 + per].contiguous()
        ws = (w[c0 : c0 + per] if transposed else w[:, c0 : c0 + per]).contiguous()
        y = conv3(m, xs, weight3(m, ws))
        out = y if out is None else out.add_(y)
    return out


def units(y: torch.Tensor, exact: torch.Tensor) -> float:
    return float(((y.double() - exact).abs() / (exact.abs() * 1e-4 + 1e-4)).max())


def widen(x: torch.Tensor, seed: int) -> torch.Tensor:
    """The sandbox's wide trial (sandbox/worker.py _widen): Student-t, 3 dof, twice x's spread."""
    g = torch.Generator(device=x.device).manual_seed(seed)
    z = torch.randn(x.shape, generator=g, device=x.device)
    chi = torch.randn((3, *x.shape), generator=g, device=x.device).pow_(2).mean(0)
    return (z / chi.clamp_min(1e-3).sqrt() * 2.0 * float(x.std())).clamp(-1e4, 1e4)


def bench_ms(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=40))


def probe_conv(m: torch.nn.Module, x: torch.Tensor) -> dict[str, Any]:
    w = m.weight.detach()
    k = (w.shape[0] if isinstance(m, torch.nn.modules.conv._ConvTransposeNd) else w.shape[1]) * math.prod(m.kernel_size)
    row: dict[str, Any] = {
        "conv": type(m).__name__,
        "x": list(x.shape),
        "w": list(w.shape),
        "stride": list(m.stride),
        "groups": m.groups,
        "K": int(k),
    }
    w3 = weight3(m, w)
    for name, xin in (("inputs", x), ("wide", widen(x, 7))):
        exact = conv_call(m, xin.double(), w.double(), False)
        row[f"err_{name}"] = {
            "fp32": units(conv_call(m, xin, w, False), exact),
            "tf32": units(conv_call(m, xin, w, True), exact),
            "3x": units(conv3(m, xin, w3), exact),
            "3x_chunked": units(chunked3(m, xin, w), exact) if m.groups == 1 else None,
        }
    xh, xl = split(x)
    x3 = stack([xl, xh, xh], m.groups, 1)
    row["ms"] = {
        "fp32": bench_ms(lambda: conv_call(m, x, w, False)),
        "fp32_search": bench_ms(lambda: conv_call(m, x, w, False, True)),
        "3x_conv": bench_ms(lambda: conv_call(m, x3, w3, True)),
        "3x_conv_search": bench_ms(lambda: conv_call(m, x3, w3, True, True)),
        "split_torch": bench_ms(lambda: stack(thirds(x), m.groups, 1)),
        "split_floor": x.numel() * 16 / 3.5e12 * 1e3,  # one read, three writes at the copy's bandwidth
    }
    return row


def load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"kb_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def probe_problem(path: Path, deadline: float) -> dict[str, Any]:
    mod = load(path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).cuda().eval()
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in mod.get_inputs()]
    seen: dict[str, tuple[torch.nn.Module, torch.Tensor]] = {}

    def hook(m, args):
        key = f"{type(m).__name__}{tuple(args[0].shape)}{tuple(m.weight.shape)}{m.stride}{m.padding}{m.groups}"
        seen.setdefault(key, (m, args[0].detach()))

    hooks = [m.register_forward_pre_hook(hook) for m in model.modules() if isinstance(m, CONVS)]
    with torch.no_grad():
        model(*inputs)
        for h in hooks:
            h.remove()
        eager = bench_ms(lambda: model(*inputs))
        calls: dict[str, int] = {}
        counter = [
            m.register_forward_pre_hook(
                lambda m, a: calls.__setitem__(
                    f"{type(m).__name__}{tuple(a[0].shape)}{tuple(m.weight.shape)}{m.stride}{m.padding}{m.groups}",
                    calls.get(
                        f"{type(m).__name__}{tuple(a[0].shape)}{tuple(m.weight.shape)}{m.stride}{m.padding}{m.groups}",
                        0,
                    )
                    + 1,
                )
            )
            for m in model.modules()
            if isinstance(m, CONVS)
        ]
        model(*inputs)
        for h in counter:
            h.remove()
        rows = []
        for key, (m, x) in sorted(seen.items(), key=lambda kv: -kv[1][1].numel() * kv[1][0].weight.numel()):
            if time.time() > deadline or x.dtype != torch.float32:
                break
            try:
                row = probe_conv(m, x)
            except (ValueError, RuntimeError) as e:
                row = {"conv": type(m).__name__, "error": str(e)[:200]}
            row["calls"] = calls.get(key, 1)
            rows.append(row)
    return {"problem": path.name, "eager_ms": eager, "convs": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", required=True, type=Path, help="the KernelBench folder holding level1..3")
    ap.add_argument("--problems", nargs="+", required=True, help="LEVEL/NUMBER")
    ap.add_argument("--time-limit", type=float, default=300)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    deadline = time.time() + args.time_limit
    results = []
    for p in args.problems:
        level, num = p.split("/")
        files = sorted((args.kernelbench / f"level{level}").glob(f"{num}_*.py"))
        if not files or time.time() > deadline:
            continue
        try:
            r = probe_problem(files[0], deadline)
        except Exception as e:  # a problem that does not load or run here is reported, not fatal
            r = {"problem": files[0].name, "error": f"{type(e).__name__}: {str(e)[:200]}"}
        torch.cuda.empty_cache()
        results.append(r)
        print_problem(p, r)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


def print_problem(p: str, r: dict[str, Any]) -> None:
    if "error" in r:
        print(f"{p} {r['problem']}: {r['error']}")
        return
    fp32 = sum(c["ms"]["fp32"] * c["calls"] for c in r["convs"] if "ms" in c)
    tf = sum((c["ms"]["3x_conv"] + c["ms"]["split_floor"]) * c["calls"] for c in r["convs"] if "ms" in c)
    print(
        f"{p} {r['problem']}: eager {r['eager_ms']:.3f} ms, convs fp32 {fp32:.3f} ms -> 3x {tf:.3f} ms "
        f"(+ split at the copy's bandwidth)"
    )
    for c in r["convs"]:
        if "ms" not in c:
            print(f"   {c}")
            continue
        e1, e2, ms = c["err_inputs"], c["err_wide"], c["ms"]
        print(
            f"   {c['conv']} x{c['x']} w{c['w']} g{c['groups']} K={c['K']} x{c['calls']}: "
            f"err fp32/tf32/3x/3xc {e1['fp32']:.3g}/{e1['tf32']:.3g}/{e1['3x']:.3g}/{e1['3x_chunked']} "
            f"wide {e2['fp32']:.3g}/{e2['tf32']:.3g}/{e2['3x']:.3g}/{e2['3x_chunked']}; "
            f"ms fp32 {ms['fp32']:.3f} (search {ms['fp32_search']:.3f}) 3x {ms['3x_conv']:.3f} "
            f"(search {ms['3x_conv_search']:.3f}) split torch {ms['split_torch']:.3f} floor {ms['split_floor']:.3f}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
