"""benchmarks.block_accounts on the CPU: an honest copy's every timing block is written next to
the parent's wall time and accepted (the GPU's false "forged reply" class is what it is for)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import block_accounts
from sandbox import protocol


def test_an_honest_copy_s_blocks_are_logged_and_accepted(tmp_path, capsys):
    task = tmp_path / "relu.py"
    task.write_text((Path(__file__).parents[1] / "sandbox" / "tasks" / "relu_rand.py").read_text())
    out = tmp_path / "blocks.jsonl"
    check = protocol._Paired._block_median
    assert block_accounts.main([str(task), "--backend", "cpu", "--evals", "1", "--out", str(out)]) == 0
    assert protocol._Paired._block_median is check  # restored
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["name"] for r in rows} == {"eager", "candidate"} and all(r["ok"] for r in rows), rows
    # on the cpu there is no back-to-back pass: the measured calls are the block, within its wall
    assert all(r["loop_sum_ms"] == 0 and 0 < r["spent"] <= r["wall_ms"] for r in rows), rows
    assert f"{len(rows)} blocks, 0 rejected" in capsys.readouterr().out
