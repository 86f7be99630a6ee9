"""Shared fixtures for the sandbox tests: a private cache, quick options, the test tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import EvalOptions

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The sandbox's tests are `quiet`: `./kw test` runs them alone, one at a time (its parallel
    pass would put other tests' compiles beside their timed loops, and the timer, parent-clock and
    hack tests judge time: a busy machine can hide what they look for)."""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.quiet)


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
