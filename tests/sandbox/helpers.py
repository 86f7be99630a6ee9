"""Paths and loaders shared by the sandbox tests."""

from __future__ import annotations

from pathlib import Path

from sandbox import load_candidate

HERE = Path(__file__).parent
TASKS = HERE / "tasks"
CANDIDATES = HERE / "candidates"
HACKS = HERE / "hacks"
GPU = HERE / "gpu"
EXAMPLES = Path("/work/shared/examples")


def task(name: str) -> str:
    return (TASKS / name).read_text()


def candidate(name: str) -> dict[str, str]:
    return load_candidate(CANDIDATES / name)
