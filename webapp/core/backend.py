"""Which sandbox backend this host would evaluate on, and which GPU: what /healthz reports.

The backend is the sandbox's own rule (sandbox.options.resolve_backend: for `auto`, cuda when the
host has an NVIDIA device, else cpu), the one a gpu worker here applies. The GPU's name and the
torch version need torch (seconds, and hundreds of MB), so the web server asks a short-lived child
process once and caches the answer; `cpu` needs no probe at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass

_PROBE = r"""
import json, torch
ok = torch.cuda.is_available()
print(json.dumps({
    "cuda_available": ok,
    "device_count": torch.cuda.device_count() if ok else 0,
    "gpu_name": torch.cuda.get_device_name(0) if ok else None,
    "torch_version": torch.__version__,
}))
"""


@dataclass(frozen=True)
class BackendInfo:
    requested: str  # auto | cpu | cuda, as configured
    backend: str  # cpu | cuda: what evaluations run on
    gpu_name: str | None
    device_count: int
    torch_version: str | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict:
        return asdict(self) | {"ok": self.ok}


def probe_torch(timeout: float = 120.0) -> dict:
    """Ask a child Python what torch sees (the parent never imports torch)."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout, env=os.environ.copy()
    )
    if proc.returncode != 0:
        raise RuntimeError(f"torch probe failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def backend_info(requested: str) -> BackendInfo:
    from sandbox.options import resolve_backend

    backend = resolve_backend(requested)
    if backend == "cpu" and requested == "cpu":
        return BackendInfo(requested, "cpu", None, 0, None)
    try:
        seen = probe_torch()
    except Exception as exc:  # a broken torch install is a health finding, not a crash
        return BackendInfo(requested, backend, None, 0, None, error=str(exc))
    if backend == "cuda" and seen["cuda_available"]:
        return BackendInfo(requested, "cuda", seen["gpu_name"], seen["device_count"], seen["torch_version"])
    error = f"KERNELWRIGHT_BACKEND={requested} means cuda here, but torch sees no GPU" if backend == "cuda" else None
    return BackendInfo(requested, backend, None, 0, seen["torch_version"], error=error)


_lock = threading.Lock()
_cached: dict[str, BackendInfo] = {}


def sandbox_backend() -> BackendInfo:
    """The backend for the configured KERNELWRIGHT_BACKEND, probed once per process."""
    from django.conf import settings

    requested = settings.KERNELWRIGHT_BACKEND
    with _lock:
        if requested not in _cached:
            _cached[requested] = backend_info(requested)
        return _cached[requested]


def warm_up_in_background() -> None:
    """Start the probe now, so the first /healthz does not wait for it."""
    threading.Thread(target=sandbox_backend, name="sandbox-backend-probe", daemon=True).start()
