from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.openai_policy import OpenAIPolicy
from agent.policy import TaskInfo
from agent.task import task_from_file
from agent.testing.scripted_server import ScriptedServer

# A copy of /work/shared/examples/row_softmax_small.py that travels with the repository.
SOFTMAX_TASK = Path(__file__).resolve().parents[2] / "agent" / "testing" / "fixtures" / "tasks" / "row_softmax_small.py"


@pytest.fixture
def scripted() -> Iterator[Callable[[dict[str, Any]], ScriptedServer]]:
    """Start a real loopback HTTP server speaking the OpenAI API with the given script."""
    servers: list[ScriptedServer] = []

    def make(script: dict[str, Any]) -> ScriptedServer:
        server = ScriptedServer(script).start()
        servers.append(server)
        return server

    yield make
    for s in servers:
        s.stop()


def policy_for(server: ScriptedServer, **kw: Any) -> OpenAIPolicy:
    kw.setdefault("backoff_base_s", 0.001)
    kw.setdefault("max_retries", 3)
    return OpenAIPolicy(
        base_url=server.url, api_key=kw.pop("api_key", "test-key"), model=kw.pop("model", "scripted-model"), **kw
    )


@pytest.fixture
def softmax_task() -> TaskInfo:
    # Fast evaluation settings: the real protocol with fewer trials and timed calls, and no
    # torch.compile baseline (its first build takes minutes on a small CPU host).
    return task_from_file(
        SOFTMAX_TASK,
        "cpu",
        {
            "compile_baseline": False,
            "preset": "kernelbench",
            "correctness_trials": 2,
            "timing_budget_s": 0.1,
            "min_timed_calls": 5,
            "max_timed_calls": 30,
            "warmup_calls": 1,
            "input_sets": 1,
        },
    )
