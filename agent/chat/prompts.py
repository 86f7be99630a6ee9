"""What the model is told: the system prompt (agent/prompts/*.md, with the backend's rules and,
under the text protocol, how to write a tool call), and the task message, which also carries
the current best candidate's files once older turns are shortened or gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.policy import TaskInfo
from agent.tools import source_for_model

PROMPTS = Path(__file__).resolve().parent.parent / "prompts"

NUDGE = "You did not call a tool. Continue by calling one of the tools, or call finish if you are done."


def system_prompt(task: TaskInfo, mode: str, specs: list[dict[str, Any]], template: str | None = None) -> str:
    text = template or (PROMPTS / "system.md").read_text(encoding="utf-8")
    backend = task.backend
    rules = (PROMPTS / f"backend_{'cuda' if backend == 'cuda' else 'cpu'}.md").read_text(encoding="utf-8")
    torch_ops = str(task.options.get("torch_ops", "forbid"))
    text = text.replace("{{backend}}", backend).replace("{{backend_rules}}", rules).replace("{{torch_ops}}", torch_ops)
    if mode == "text":
        text += "\n\n" + text_protocol(specs)
    return text


def text_protocol(specs: list[dict[str, Any]]) -> str:
    """How to call a tool in plain text (```tool {json}``` blocks), for endpoints without `tools`."""
    proto = (PROMPTS / "text_protocol.md").read_text(encoding="utf-8")
    lines = []
    for spec in specs:
        f = spec["function"]
        props = f["parameters"].get("properties", {})
        args = ", ".join(f'"{k}": <{v.get("type", "string")}>' for k, v in props.items())
        lines.append(f"- {f['name']} {{{args}}}: {f['description']}")
    return proto.replace("{{tools}}", "\n".join(lines))


def task_message(
    task: TaskInfo, dropped_turns: int = 0, compact_level: int = 0, best: dict[str, Any] | None = None
) -> str:
    opts = ", ".join(f"{k}={v}" for k, v in sorted(task.options.items())) or "defaults"
    parts = [
        f"Task: {task.name} (backend: {task.backend}; sandbox options: {opts})",
        "The reference module (also readable as reference.py, which you cannot change):",
        f"```python\n{source_for_model(task.source).rstrip()}\n```",
        "Write model_new.py with class ModelNew and your kernels, evaluate, then improve. Start now by calling a tool.",
    ]
    if dropped_turns or compact_level:
        if dropped_turns:
            parts.append(
                f"[Context note: {dropped_turns} earlier turn(s) were removed to fit the context window. "
                "Their file edits are still in the workspace: list_files/read_file show the current state.]"
            )
        if best:
            files = "\n".join(f"--- {p} ---\n{c}" for p, c in sorted(best.get("files", {}).items()))
            parts.append(
                f"Current best verified candidate (workspace version {best.get('version')}, reward {best.get('reward')}, "
                f"speedup vs eager {best.get('speedup_vs_eager')}):\n{files}"
            )
    return "\n\n".join(parts)
