"""Gallery case studies keep their ids, so their URLs (/jobs/<id>/), across loads and restarts
(issue 20): `manage.py load_gallery` (what `./kw run` runs at every start), run as a real process
against a database of its own, leaves unchanged case studies untouched, updates a changed one in
place, and adopts one loaded before keys existed."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from tests.support.processes import ROOT
from webapp.jobs.sample_trajectory import build

pytestmark = pytest.mark.slow


def manage(db, *args: str) -> str:
    env = os.environ | {"DATABASE_URL": f"sqlite:///{db}", "DJANGO_SETTINGS_MODULE": "webapp.settings"}
    proc = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def rows(db) -> dict[str, tuple[int, list[int]]]:
    """gallery key -> (job id, its turns' ids)"""
    with sqlite3.connect(db) as conn:
        jobs = conn.execute("SELECT id, gallery_key FROM jobs_job WHERE gallery = 1").fetchall()
        return {
            key: (pk, [t for (t,) in conn.execute("SELECT id FROM jobs_turn WHERE job_id = ? ORDER BY id", (pk,))])
            for pk, key in jobs
        }


def test_loading_twice_keeps_every_id_and_a_changed_case_is_updated_in_place(tmp_path) -> None:
    db, cases = tmp_path / "app.sqlite3", tmp_path / "gallery"
    cases.mkdir()
    (cases / "softmax.json").write_text(json.dumps(build(turns=3, name="softmax case")))
    (cases / "matmul.json").write_text(json.dumps(build(turns=2, name="matmul case")))
    manage(db, "migrate", "--noinput")

    first = manage(db, "load_gallery", str(cases))
    before = rows(db)
    assert set(before) == {"softmax", "matmul"} and "2 new" in first

    again = manage(db, "load_gallery", str(cases))  # a restart
    assert rows(db) == before  # same jobs, same turns: nothing deleted and re-created
    assert "2 unchanged" in again

    (cases / "softmax.json").write_text(json.dumps(build(turns=5, name="softmax case")))
    changed = manage(db, "load_gallery", str(cases))
    after = rows(db)
    assert "1 updated, 1 unchanged" in changed
    assert after["softmax"][0] == before["softmax"][0]  # the same id, so the same URL
    assert len(after["softmax"][1]) == len(before["softmax"][1]) + 2
    assert after["matmul"] == before["matmul"]


def test_a_case_study_loaded_before_keys_existed_is_adopted_not_recreated(tmp_path) -> None:
    db, cases = tmp_path / "app.sqlite3", tmp_path / "gallery"
    cases.mkdir()
    (cases / "softmax.json").write_text(json.dumps(build(turns=2, name="softmax case")))
    manage(db, "migrate", "--noinput")
    manage(db, "load_gallery", str(cases))
    ((pk, _),) = rows(db).values()
    with sqlite3.connect(db) as conn:  # as an older load left it
        conn.execute("UPDATE jobs_job SET gallery_key = NULL, gallery_digest = ''")
    out = manage(db, "load_gallery", str(cases))
    assert "1 updated" in out
    assert rows(db) == {"softmax": (pk, rows(db)["softmax"][1])}
