"""Diffs in the trajectory viewer: recomputed on the server from the file edits (difflib), shown
unified or side by side, syntax highlighted by Pygments as data and rendered as text."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from webapp.jobs.diffview import MAX_DIFF_LINES, edit_diffs, file_diff
from webapp.jobs.highlight import highlight_lines, highlight_path, language_for, stylesheet
from webapp.jobs.importer import import_trajectory
from webapp.jobs.sample_trajectory import build

STATIC = Path(__file__).resolve().parents[2] / "webapp" / "jobs" / "static" / "jobs"

PY = '''"""A docstring
over two lines."""
import torch  # a comment


def f(x):
    return torch.relu(x) + 1.5
'''
CPP = """// row softmax
#include <cmath>
extern "C" int softmax_rows(const float* x, float* out, long rows) {
    /* a block
       comment */
    return 0;
}
"""
CUDA = """__global__ void k(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __expf(x[i]);
}
"""
EVIL = "</pre></td></table><script>alert('pwned')</script><img src=x onerror=alert(1)>"


def text_of(line) -> str:
    return "".join(text for _, text in line)


# -- highlighting ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "source"), [("model_new.py", PY), ("kernels/a.cpp", CPP), ("kernels/a.cu", CUDA), ("notes.txt", PY)]
)
def test_highlighted_lines_give_back_exactly_the_input(path, source):
    lines = highlight_path(source, path)
    assert [text_of(line) for line in lines] == source.split("\n")


def test_languages_and_token_classes():
    assert (language_for("model_new.py"), language_for("k/a.CU"), language_for("k/a.cpp"), language_for("README")) == (
        "python",
        "cuda",
        "cpp",
        None,
    )
    py = highlight_path(PY, "model_new.py")
    assert ("k", "def") in py[5] and ("nf", "f") in py[5]  # keyword, function name
    assert py[0][0][0] == "sd" and py[1][0][0] == "sd"  # the docstring stays a string on both of its lines
    cu = highlight_path(CUDA, "kernels/a.cu")
    assert any(text == "__global__" and cls for cls, text in cu[0])  # CUDA's own keywords
    assert any(text == "threadIdx" and cls for cls, text in cu[1])
    cpp = highlight_path(CPP, "kernels/a.cpp")
    assert cpp[3][-1][0].startswith("c") and cpp[4][-1][0].startswith("c")  # a block comment over two lines
    assert highlight_lines(PY, None) == [[("", line)] if line else [] for line in PY.split("\n")]


def test_model_markup_in_code_is_only_text():
    for path in ("model_new.py", "kernels/a.cu", "x.txt"):
        lines = highlight_path(f"# {EVIL}\nx = '{EVIL}'\n", path)
        assert "".join(text_of(line) for line in lines).count("<script>") == 2  # data, not markup
        for line in lines:
            for cls, _ in line:
                assert re.fullmatch(r"[a-z0-9]*", cls)  # classes come from Pygments' table only


def test_the_static_stylesheet_covers_the_classes_the_highlighter_emits():
    css = (STATIC / "highlight.css").read_text()
    assert (
        css == stylesheet()
    )  # regenerate with: python -m webapp.jobs.highlight > webapp/jobs/static/jobs/highlight.css
    used = {
        cls
        for src, path in ((PY, "a.py"), (CPP, "a.cpp"), (CUDA, "a.cu"))
        for line in highlight_path(src, path)
        for cls, _ in line
        if cls
    }
    defined = set(re.findall(r"^\.hl \.([a-z0-9]+) ", css, re.M))
    assert {"k", "kn", "nf", "c1", "cm", "sd", "mf"} <= used & defined  # what makes code readable is styled
    assert "http" not in css and "@import" not in css


# -- diffs -------------------------------------------------------------------------------------
OLD = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n"
NEW = "a\nb\nC\nd\ne\nf\ng\nh\ni\nj\nk\n"


def unified_from(fd) -> list[str]:
    """The unified rows written back as a unified diff's lines (without the file headers)."""
    out = []
    for h in fd.hunks:
        out.append(h.header)
        out += [{"ctx": " ", "add": "+", "del": "-"}[r.kind] + text_of(r.segments) for r in h.unified]
    return out


def test_unified_rows_match_difflib():
    fd = file_diff("notes.txt", OLD, NEW)
    expected = list(difflib.unified_diff(OLD.splitlines(), NEW.splitlines(), lineterm=""))[2:]
    assert unified_from(fd) == expected
    assert (fd.status, fd.added, fd.removed) == ("modified", 2, 1)
    first = fd.hunks[0].unified
    assert [(r.kind, r.old_number, r.new_number) for r in first[:4]] == [
        ("ctx", 1, 1),
        ("ctx", 2, 2),
        ("del", 3, None),
        ("add", None, 3),
    ]


def test_side_by_side_pairs_changed_lines_and_pads_the_rest():
    fd = file_diff("notes.txt", OLD, NEW)
    rows = [r for h in fd.hunks for r in h.split]
    changed = [r for r in rows if r.left.kind != "ctx"]
    assert [
        (r.left.kind, r.left.number, text_of(r.left.segments), r.right.kind, r.right.number, text_of(r.right.segments))
        for r in changed
    ] == [
        ("del", 3, "c", "add", 3, "C"),
        ("empty", None, "", "add", 11, "k"),
    ]
    ctx = [r for r in rows if r.left.kind == "ctx"]
    assert all(r.right.kind == "ctx" and text_of(r.left.segments) == text_of(r.right.segments) for r in ctx)


def test_added_same_and_too_large_files():
    added = file_diff("model_new.py", None, PY)
    assert added.status == "added" and added.added == len(PY.splitlines()) and added.removed == 0
    assert all(r.left.kind == "empty" and r.right.kind == "add" for h in added.hunks for r in h.split)
    assert file_diff("a.py", PY, PY).same
    big = "x\n" * (MAX_DIFF_LINES + 1)
    assert file_diff("a.py", big, big + "y\n").status == "too_large"


def test_edit_diffs_follow_the_workspace_through_a_turn():
    events = [
        {"type": "file_edit", "path": "a.py", "content": "x = 1\n"},
        {"type": "model_message", "content": "hi"},
        {"type": "file_edit", "path": "a.py", "content": "x = 2\n"},
    ]
    before = {"a.py": "x = 0\n"}
    d1, none, d2 = edit_diffs(events, before)
    assert none is None and before == {"a.py": "x = 0\n"}
    assert unified_from(d1)[1:] == ["-x = 0", "+x = 1"] and unified_from(d2)[1:] == ["-x = 1", "+x = 2"]


# -- the viewer ----------------------------------------------------------------------------------
@pytest.fixture
def owner(db):
    return User.objects.create_user("diff-owner", password="pw-diff-123")


@pytest.fixture
def client(owner) -> Client:
    c = Client()
    c.force_login(owner)
    return c


def evil_trajectory() -> dict:
    """The sample, with model-written markup in the code of turn 2 (a C++ comment and a string)."""
    data = build(turns=3)
    for e in data["events"]:
        if e["type"] == "file_edit" and e["turn"] == 2:
            e["content"] = e["content"].replace("// softmax_rows", f"// {EVIL}\n// softmax_rows")
        if e["type"] == "tool_call" and e["name"] == "write_file" and e["turn"] == 2:
            e["arguments"]["content"] = e["arguments"]["content"].replace(
                "// softmax_rows", f"// {EVIL}\n// softmax_rows"
            )
    return data


@pytest.mark.django_db
def test_the_viewer_shows_both_layouts_highlighted_and_escaped(client, owner):
    job = import_trajectory(owner, evil_trajectory())
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    turn2 = html.split('id="turn-2"')[1].split("</article>")[0]
    assert '<table class="diff unified hl">' in turn2 and '<table class="diff split hl">' in turn2
    # turn 2 changed one line of turn 1's file and added the evil comment: the old text came from turn 1
    assert '<tr class="d-del"><td class="ln">3</td><td class="ln"></td>' in turn2
    assert "/* version 1 */" in turn2 and "/* version 2 */" in turn2
    assert (
        '<span class="c1">// &lt;/pre&gt;&lt;/td&gt;&lt;/table&gt;&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;'
        in turn2
    )
    assert "<script>alert" not in html and "<img src=x" not in html
    assert '<span class="k">return</span>' in turn2  # C++ keywords highlighted in the diff
    # the file the turn wrote, in the tool call, is highlighted too; the reference module as Python
    assert '<pre class="code hl">' in turn2
    ref = html.split("Reference module")[1]
    assert '<span class="kn">import</span>' in ref
    # the layout toggle, its script and the stylesheet come from this server, nothing from elsewhere
    assert (
        'name="diff-mode" value="split"' in html
        and "/static/jobs/diffmode.js" in html
        and "/static/jobs/highlight.css" in html
    )
    assert not re.search(r"""<(script|link)[^>]+(src|href)=["']?(https?:)?//""", html)


@pytest.mark.django_db
def test_a_folded_turn_rendered_alone_diffs_against_the_earlier_turns(client, owner):
    job = import_trajectory(owner, build(turns=4))
    cache.clear()  # nothing rendered yet: the workspace before turn 4 must come from turns 1-3
    one = client.get(f"/jobs/{job.pk}/turns/4/html").content.decode()
    assert "/* version 3 */" in one and "/* version 4 */" in one and "fd-modified" in one
    first = client.get(f"/jobs/{job.pk}/turns/1/html").content.decode()
    assert "fd-added" in first and "d-del" not in first


@pytest.mark.django_db
def test_the_workspace_after_a_turn_is_cached_for_the_next(client, owner):
    from webapp.jobs import turn_html

    job = import_trajectory(owner, build(turns=3))
    cache.clear()
    turns = list(job.turns.order_by("index"))
    turn_html.turns_html(turns)
    t2 = turns[2]
    key = turn_html._files_key(job.pk, t2.pk, t2.revision, t2.created_at)
    assert cache.get(key) == {"kernels/softmax.cpp": next(e["content"] for e in t2.events if e["type"] == "file_edit")}
    # a stale cached workspace would show in turn 3's diff: prove turn 3 reads it
    cache.set(key, {"kernels/softmax.cpp": "planted old text\n"})
    cache.delete(turn_html._key(turns[3]))
    html = turn_html.turn_html(turns[3])
    assert (
        '<tr class="d-del"><td class="ln">1</td><td class="ln"></td><td class="src"><span class="n">planted</span> <span class="n">old</span>'
        in html
    )


# -- the layout toggle in a real browser -------------------------------------------------------------
ORIGIN = "http://kw.test"


def serve_pages(page, pages: dict[str, bytes], seen: list[str]) -> None:
    """Chromium asks, this answers: pages rendered by Django's test client beforehand (the
    browser's running event loop would give Django another database connection, outside the
    test's transaction), static files from the app's folder. The page's own JS runs for real."""

    def handle(route):
        url = urlparse(route.request.url)
        seen.append(route.request.url)
        path = url.path + (f"?{url.query}" if url.query else "")
        if path in pages:
            return route.fulfill(status=200, body=pages[path], headers={"Content-Type": "text/html; charset=utf-8"})
        file = STATIC / url.path.removeprefix("/static/jobs/")
        if url.path.startswith("/static/jobs/") and file.is_file():
            ctype = "text/css" if file.suffix == ".css" else "application/javascript"
            return route.fulfill(status=200, body=file.read_bytes(), headers={"Content-Type": ctype})
        return route.fulfill(status=404, body=b"")  # plotly and the rest: not needed here

    page.route("**/*", handle)


@pytest.mark.slow
@pytest.mark.django_db
def test_the_layout_toggle_switches_and_is_remembered(request, client, owner):
    job = import_trajectory(owner, evil_trajectory())
    job_page, compare_page = f"/jobs/{job.pk}/", f"/compare/?a={job.pk}&ta=1&b={job.pk}&tb=2"
    pages = {path: client.get(path).content for path in (job_page, compare_page)}
    page = request.getfixturevalue("browser_page")
    seen: list[str] = []
    serve_pages(page, pages, seen)
    alerts: list[str] = []
    page.on("dialog", lambda d: (alerts.append(d.message), d.dismiss()))

    page.goto(ORIGIN + job_page)
    unified = page.locator("#turn-2 table.diff.unified").first
    split = page.locator("#turn-2 table.diff.split").first
    assert unified.is_visible() and not split.is_visible()  # the job page's default
    page.check("#diff-mode-split")
    assert split.is_visible() and not unified.is_visible()
    assert page.evaluate("localStorage.getItem('kw.diffMode')") == "split"
    # highlighted: a C++ keyword is coloured by the local stylesheet
    color = page.locator("#turn-2 table.diff.split span.k").first.evaluate("e => getComputedStyle(e).color")
    assert color == "rgb(0, 128, 0)"

    page.reload()
    assert page.locator("#turn-2 table.diff.split").first.is_visible()  # remembered
    assert page.is_checked("#diff-mode-split")

    page.goto(ORIGIN + compare_page)
    assert page.locator("#compare-diffs table.diff.split").first.is_visible()
    page.check("#diff-mode-unified")
    page.goto(ORIGIN + job_page)
    assert page.locator("#turn-2 table.diff.unified").first.is_visible()
    assert not page.locator("#turn-2 table.diff.split").first.is_visible()

    assert alerts == []  # the model's <script> and onerror never ran
    assert all(u.startswith(ORIGIN + "/") for u in seen), [u for u in seen if not u.startswith(ORIGIN)]
