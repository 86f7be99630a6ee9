"""sandbox.options.resolve_backend: the one rule for "auto", applied where the evaluation runs."""

from __future__ import annotations

import pytest

from sandbox.options import BACKENDS, EvalOptions, cuda_present, resolve_backend


def test_a_named_backend_is_kept_whatever_the_host_says() -> None:
    assert resolve_backend("cpu", "cuda") == "cpu"
    assert resolve_backend("cuda", "cpu") == "cuda"


def test_auto_follows_the_hosts_configured_backend_first() -> None:
    assert resolve_backend("auto", "cpu") == "cpu"
    assert resolve_backend("auto", "cuda") == "cuda"


def test_auto_on_an_unconfigured_host_follows_its_devices(monkeypatch) -> None:
    monkeypatch.delenv("KERNELWRIGHT_FORCE_CPU", raising=False)
    assert resolve_backend("auto") == ("cuda" if cuda_present() else "cpu")
    monkeypatch.setenv("KERNELWRIGHT_FORCE_CPU", "1")
    assert resolve_backend("auto") == "cpu"
    assert EvalOptions(backend="auto").resolved_backend() == "cpu"


@pytest.mark.parametrize(("requested", "configured"), [("gpu", "auto"), ("auto", "CUDA"), ("", "auto")])
def test_an_unknown_backend_is_an_error_naming_the_choices(requested: str, configured: str) -> None:
    with pytest.raises(ValueError, match="must be one of") as err:
        resolve_backend(requested, configured)
    assert all(b in str(err.value) for b in BACKENDS)
