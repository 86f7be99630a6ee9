"""The sandbox backend in /healthz: resolved once, and without torch in the web process."""

from __future__ import annotations

import subprocess
import sys

from sandbox.options import cuda_present
from webapp.core.backend import backend_info


def test_cpu_backend_needs_no_probe() -> None:
    info = backend_info("cpu")
    assert (info.backend, info.gpu_name, info.torch_version, info.ok) == ("cpu", None, None, True)


def test_auto_follows_the_sandbox_rule_and_reports_what_torch_sees() -> None:
    import torch

    info = backend_info("auto")
    assert info.backend == ("cuda" if cuda_present() else "cpu")
    assert info.ok == (info.backend == "cpu" or torch.cuda.is_available())
    assert info.torch_version == torch.__version__
    if info.backend == "cuda":
        assert info.gpu_name == torch.cuda.get_device_name(0)


def test_cuda_requested_without_a_gpu_is_reported_not_hidden() -> None:
    import torch

    info = backend_info("cuda")
    if torch.cuda.is_available():
        assert info.ok and info.backend == "cuda"
    else:
        assert not info.ok and "no GPU" in info.error


def test_health_check_does_not_import_torch_in_the_web_process() -> None:
    code = (
        "import django, os, sys; os.environ['DJANGO_SETTINGS_MODULE'] = 'webapp.settings'; django.setup();"
        "from webapp.core.health import check_sandbox; print(check_sandbox()[0]);"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=True)
    assert out.stdout.split()[-1] == "False"
