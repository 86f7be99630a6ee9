"""A KernelBench case study in the gallery (issue 18): its fixture holds none of KernelBench's
text, `load_gallery` puts the text back from a local checkout, and shows the job with the
problem's source; without a checkout (a user's fresh machine) it is skipped, said so, and the
other case studies still load."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from django.core.management import call_command
from django.test import Client

from benchmarks import kbfixture
from webapp.jobs.models import Job
from webapp.jobs.sample_trajectory import build

pytestmark = pytest.mark.django_db


def _kernelbench_case(tmp_path):
    """A trajectory of our own whose task is put in a stand-in checkout as 'level1/999_Case.py',
    and its fixture redacted as benchmarks.case_studies writes KernelBench ones."""
    data = build(turns=2, name="L1/999 KernelBench case")
    source = next(e["source"] for e in data["events"] if e.get("type") == "task")
    root = tmp_path / "kb"
    (root / "level1").mkdir(parents=True)
    (root / "level1" / "999_Case.py").write_text(source)
    sha = hashlib.sha256(source.encode()).hexdigest()
    fixture = kbfixture.redact(data, source, "level1/999_Case.py", sha, 1)
    cases = tmp_path / "gallery"
    cases.mkdir()
    (cases / "kb1_999.json").write_text(json.dumps(fixture))
    (cases / "ours.json").write_text(json.dumps(build(turns=2, name="our case")))
    return root, cases, source, fixture


def test_a_kernelbench_case_loads_from_a_checkout_with_its_source(tmp_path):
    root, cases, source, fixture = _kernelbench_case(tmp_path)
    lines = [line.strip() for line in source.splitlines() if len(line.strip()) >= kbfixture.MIN_LINE]
    assert lines and not any(json.dumps(line)[1:-1] in json.dumps(fixture) for line in lines)
    out = io.StringIO()
    call_command("load_gallery", str(cases), kernelbench=str(root), stdout=out)
    job = Job.objects.get(name="L1/999 KernelBench case")
    assert job.source == source and "⟦kb:" not in job.source
    page = Client().get(f"/jobs/{job.pk}/").content.decode()
    assert "⟦kb:" not in page
    assert "2 new" in out.getvalue()


def test_without_a_checkout_it_is_skipped_and_the_rest_loads(tmp_path, monkeypatch):
    _, cases, _, _ = _kernelbench_case(tmp_path)
    monkeypatch.delenv(kbfixture.CHECKOUT_ENV, raising=False)
    monkeypatch.setattr(kbfixture, "DEFAULT_CHECKOUT", tmp_path / "nowhere")
    out = io.StringIO()
    call_command("load_gallery", str(cases), stdout=out)
    assert [j.name for j in Job.objects.all()] == ["our case"]
    assert "kb1_999.json: skipped, a KernelBench case study needs a KernelBench checkout" in out.getvalue()
    assert "1 KernelBench case(s) skipped" in out.getvalue()
