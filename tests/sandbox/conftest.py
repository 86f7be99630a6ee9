"""Shared fixtures for the sandbox tests: a private cache, quick options, the test tasks."""

from __future__ import annotations

import pytest

from sandbox import EvalOptions


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("kw-cache"))


@pytest.fixture
def quick(cache_dir):
    """Options for fast CPU tests: no torch.compile baseline, a tiny timing budget."""

    def make(**overrides) -> EvalOptions:
        kw = dict(
            backend="cpu",
            compile_baseline=False,
            timing_budget_s=0.05,
            min_timed_calls=20,
            warmup_calls=2,
            cache_dir=cache_dir,
            eval_timeout_s=120,
        )
        kw.update(overrides)
        return EvalOptions(**kw)

    return make
