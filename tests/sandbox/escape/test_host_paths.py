"""Host paths the root parent touches for untrusted code (docs/security.md, "Host paths"): the
load_inline manifest the prebuild child sends back (red-team a7), the torch.compile caches a task
fills (a10), a candidate folder with links in it (a8) and the child paths behind them
(`Child.to_host`, `Child.write_files`). None may read or write a host file outside the folders
the parent made, through `..`, a link or a special file."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from types import SimpleNamespace

import pytest

from sandbox import EvalOptions, compile_cache, compile_candidate, evaluate, hostfs, load_candidate, protocol
from sandbox.build import _BadManifest, _manifest_entry
from sandbox.isolation import Child
from sandbox.schema import Status
from tests.sandbox.helpers import candidate
from tests.sandbox.test_compile import INLINE
from tests.sandbox.test_isolation import assert_next_evaluation_works

# The prebuild child imports the candidate once with load_inline recorded; this one finds the
# recorder's list in its closure and adds a forged entry, then reads back what the parent copied.
FORGER = """import json
import os

import torch
import torch.nn as nn
from torch.utils import cpp_extension

CFG = json.loads({cfg!r})
HERE = os.environ.get("KW_WORKDIR", os.getcwd())
cells = [c.cell_contents for c in (getattr(cpp_extension.load_inline, "__clo" + "sure__") or ())]
lists = [c for c in cells if isinstance(c, list)]
if lists:
    os.makedirs(HERE + "/ext", exist_ok=True)
    with open(HERE + "/ext/payload.so", "w") as f:
        f.write("written by the prebuild child")
    if CFG["how"] == "link":
        os.symlink(CFG["secret"], HERE + "/ext/leak.so")
    up = "/".join([".."] * 40)
    so_path = {{"dotdot": HERE + "/" + up + CFG["secret"], "link": HERE + "/ext/leak.so"}}.get(CFG["how"])
    arg_hash = up + CFG["marker"] if CFG["how"] == "arg_hash" else "0" * 32
    lists[0].append({{"name": "x", "arg_hash": arg_hash, "so_path": so_path or HERE + "/ext/payload.so",
                      "is_python_module": True}})


class ModelNew(nn.Module):
    def forward(self, x):
        got = {{}}
        for root, _dirs, names in os.walk(HERE + "/inline"):
            for name in names:
                with open(os.path.join(root, name), errors="replace") as f:
                    got[name] = f.read()
        raise RuntimeError("EXFIL " + repr(got))
"""


def _files_under(folder: Path) -> list[Path]:
    return [Path(r) / n for r, _d, names in os.walk(folder) for n in names]


@pytest.mark.parametrize("how", ["dotdot", "link", "arg_hash"])
def test_the_inline_manifest_cannot_read_or_write_host_files(quick, tmp_path, how, monkeypatch):
    """a7: so_path with `..` or through a link copied a host file into the cache (served to the
    candidate as inline/<file>); arg_hash with `..` wrote one anywhere, as root. Through
    compile_candidate with the static scan off (it rejects the forger's closure walk before the
    prebuild): only these checks stand."""
    monkeypatch.setattr(protocol, "REJECT_STATIC", False)
    secret = "kwsecret" + secrets.token_hex(12)
    (tmp_path / "secret.so").write_text(secret)  # named like a module: only the path's checks stop it
    marker = tmp_path / "PWNED"
    cfg = {"how": how, "secret": str(tmp_path / "secret.so"), "marker": str(marker)}
    cache_dir = tmp_path / "cache"
    files = {"model_new.py": FORGER.format(cfg=json.dumps(cfg))}
    res = compile_candidate(files, quick(cache_dir=str(cache_dir)))
    assert not res.ok and res.mode == "load_inline", res.log[-3000:]
    assert any("load_inline" in e.message for e in res.errors), res.errors
    assert secret not in json.dumps(res.to_dict())
    assert not list(tmp_path.glob("PWNED*"))
    assert not any(secret in f.read_text(errors="replace") for f in _files_under(cache_dir) if f.is_file())
    if how == "link":
        assert_next_evaluation_works(quick)


def test_manifest_fields_are_checked():
    good = {
        "name": "kw_ext",
        "arg_hash": "a" * 32,
        "so_path": "/kw/work/ext/kw_ext/kw_ext.so",
        "is_python_module": True,
    }
    stored, so_path = _manifest_entry(good)
    assert stored == {"name": "kw_ext", "arg_hash": "a" * 32, "file": "a" * 32 + ".so", "is_python_module": True}
    for bad in (
        {"arg_hash": "../../../tmp/x"},
        {"arg_hash": "A" * 32},
        {"name": "../x"},
        {"name": "a/b"},
        {"so_path": None},
        {"so_path": "/kw/work/ext/x.txt"},
        {"is_python_module": "yes"},
    ):
        with pytest.raises(_BadManifest):
            _manifest_entry(good | bad)


@pytest.mark.slow
def test_a_stored_build_with_a_bad_manifest_is_built_again(tmp_path):
    """An entry cached before the manifest was checked (its `file` names anything) is never served."""
    options = EvalOptions(backend="cpu", cache_dir=str(tmp_path), compile_baseline=False)
    files = {"model_new.py": INLINE}
    first = compile_candidate(files, options)
    assert first.ok, first.log[-3000:]
    meta_path = next((tmp_path / "builds").glob("*/meta.json"), None)
    meta = json.loads(meta_path.read_text())
    meta["manifest"][0]["file"] = "../../../../etc/hostname"
    meta_path.write_text(json.dumps(meta))
    again = compile_candidate(files, options)
    assert again.ok and not again.cached
    stored = json.loads(meta_path.read_text())["manifest"]
    assert stored[0]["file"] == stored[0]["arg_hash"] + ".so"


def _child_shell(tmp_path: Path) -> Child:
    """A Child's paths without a process: to_host and write_files only need its folders."""
    child = Child.__new__(Child)
    child.workdir = tmp_path / "work"
    child.workdir.mkdir()
    child.inside_root = Path("/kw/work")
    child.uid = None
    return child


def test_to_host_refuses_paths_that_leave_the_child_folder(tmp_path):
    child = _child_shell(tmp_path)
    (child.workdir / "ext").mkdir()
    (child.workdir / "ext" / "a.so").write_text("ok")
    (tmp_path / "secret").write_text("secret")
    os.symlink(tmp_path / "secret", child.workdir / "ext" / "link.so")
    assert child.to_host("/kw/work/ext/a.so") == Path(os.path.realpath(child.workdir / "ext" / "a.so"))
    for escape in ("/kw/work/../../" + str(tmp_path / "secret"), "/kw/work/ext/../../secret", "/kw/work/ext/link.so"):
        with pytest.raises(ValueError):
            child.to_host(escape)
    with pytest.raises(ValueError):
        child.to_host("/etc/passwd")


def test_write_files_never_writes_through_a_link_or_out_of_the_folder(tmp_path):
    child = _child_shell(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, child.workdir / "cand")
    with pytest.raises(OSError):
        child.write_files({"model_new.py": "x"})
    (child.workdir / "cand").unlink()
    for name in ("../escaped.py", "/tmp/abs.py", "a//b.py", "."):
        with pytest.raises(OSError):
            child.write_files({name: "x"})
    os.makedirs(child.workdir / "cand" / "kernels")
    os.symlink(outside / "x.h", child.workdir / "cand" / "kernels" / "x.h")
    with pytest.raises(OSError):
        child.write_files({"kernels/x.h": "x"})
    assert list(outside.iterdir()) == [] and not (tmp_path / "escaped.py").exists()
    assert child.write_files({"kernels/sub/y.h": "ok"}) == child.workdir / "cand"
    assert (child.workdir / "cand" / "kernels" / "sub" / "y.h").read_text() == "ok"


# -- a10: the torch.compile caches -----------------------------------------------------------------


def _ref(tmp_path: Path, name: str) -> SimpleNamespace:
    workdir = tmp_path / name
    workdir.mkdir()
    return SimpleNamespace(workdir=workdir, give_ownership=lambda path: None)


def _hostile_inductor(workdir: Path, target: Path) -> None:
    inductor = workdir / ".inductor"
    (inductor / "fx" / "ab").mkdir(parents=True)
    (inductor / "fx" / "ab" / "graph.py").write_text("cached")
    os.symlink(target, inductor / "zz_plant")
    os.symlink(target / "file.txt", inductor / "fx" / "file_link")
    os.mkfifo(inductor / "fifo")


def test_the_compile_cache_carries_no_link_or_special_file(tmp_path):
    """a10: a link the task planted in .inductor went to the host cache, came back into the next
    reference and, after the task swapped in a folder, the host copy wrote through it as root."""
    target = tmp_path / "target"
    target.mkdir()
    options = EvalOptions(backend="cpu", cache_dir=str(tmp_path / "cache"), compile_baseline=True)
    first = _ref(tmp_path, "first")
    _hostile_inductor(first.workdir, target)
    compile_cache.keep(first, "t", "cpu", options)
    entry = compile_cache.entry_dir("t", "cpu", options)
    kept = entry / ".inductor"
    assert (kept / "fx" / "ab" / "graph.py").read_text() == "cached"
    assert not [p for p in kept.rglob("*") if p.is_symlink() or not (p.is_dir() or p.is_file())]
    second = _ref(tmp_path, "second")
    compile_cache.seed(second, "t", "cpu", options)
    assert (second.workdir / ".inductor" / "fx" / "ab" / "graph.py").read_text() == "cached"
    assert not (second.workdir / ".inductor" / "zz_plant").exists()
    # the second task turns the (uncopied) link into a folder with a file: the keep replaces the entry
    (second.workdir / ".inductor" / "zz_plant").mkdir()
    (second.workdir / ".inductor" / "zz_plant" / "PWNED.txt").write_text("x")
    compile_cache.keep(second, "t", "cpu", options)
    assert list(target.iterdir()) == []
    assert (kept / "zz_plant" / "PWNED.txt").is_file() and not (kept / "zz_plant").is_symlink()
    assert not list(entry.glob(".new-*"))


def test_a_poisoned_cache_entry_is_neither_seeded_nor_written_through(tmp_path):
    """An entry stored before this check (it holds a link) seeds no link and is replaced whole."""
    target = tmp_path / "target"
    target.mkdir()
    options = EvalOptions(backend="cpu", cache_dir=str(tmp_path / "cache"), compile_baseline=True)
    entry = compile_cache.entry_dir("t", "cpu", options)
    (entry / ".inductor").mkdir(parents=True)
    os.symlink(target, entry / ".inductor" / "zz_plant")
    ref = _ref(tmp_path, "ref")
    compile_cache.seed(ref, "t", "cpu", options)
    assert not os.path.lexists(ref.workdir / ".inductor" / "zz_plant")
    (ref.workdir / ".inductor" / "zz_plant").mkdir()
    (ref.workdir / ".inductor" / "zz_plant" / "PWNED.txt").write_text("x")
    compile_cache.keep(ref, "t", "cpu", options)
    assert list(target.iterdir()) == []
    assert not (entry / ".inductor" / "zz_plant").is_symlink()


def test_the_compile_cache_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(compile_cache, "MAX_BYTES", 1000)
    options = EvalOptions(backend="cpu", cache_dir=str(tmp_path / "cache"), compile_baseline=True)
    ref = _ref(tmp_path, "ref")
    (ref.workdir / ".inductor").mkdir()
    (ref.workdir / ".inductor" / "big").write_bytes(b"x" * 2000)
    compile_cache.keep(ref, "t", "cpu", options)
    entry = compile_cache.entry_dir("t", "cpu", options)
    assert not (entry / ".inductor").exists() and not list(entry.glob(".new-*"))


HOSTILE_TASK = """import os

import torch
import torch.nn as nn

TARGET = {target!r}
_cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(os.getcwd(), ".inductor")
try:
    os.makedirs(_cache, exist_ok=True)
    _link = os.path.join(_cache, "zz_plant")
    if os.path.islink(_link):
        os.unlink(_link)
        os.mkdir(_link)
        with open(os.path.join(_link, "PWNED_by_task.txt"), "w") as f:
            f.write("written on the host through the compile cache")
    elif not os.path.exists(_link):
        os.symlink(TARGET, _link)
except OSError:
    pass


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
"""


@pytest.mark.slow
def test_a_task_cannot_write_through_the_compile_cache(quick, tmp_path):
    """a10 end to end: two evaluations of a task that plants a link in its torch.compile cache."""
    target = tmp_path / "target"
    target.mkdir()
    src = HOSTILE_TASK.format(target=str(target))
    options = quick(compile_baseline=True, cache_dir=str(tmp_path / "cache"), eval_timeout_s=500)
    for _ in range(2):
        res = evaluate(src, candidate("softmax_cpp"), options)
        assert res.status == Status.OK and res.timing.compile is not None, res.reasons
    assert list(target.iterdir()) == []
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_symlink()]


# -- a8: a candidate folder --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["file link", "folder link", "fifo"])
def test_load_candidate_follows_no_link(tmp_path, kind):
    """a8: a link in an uploaded or unpacked folder read the host file it names into the candidate."""
    secret = "kwsecret" + secrets.token_hex(12)
    (tmp_path / "secret.h").write_text(secret)
    folder = tmp_path / "cand"
    (folder / "kernels").mkdir(parents=True)
    (folder / "model_new.py").write_text("class ModelNew: pass\n")
    if kind == "file link":
        os.symlink(tmp_path / "secret.h", folder / "kernels" / "notes.h")
    elif kind == "folder link":
        os.symlink(tmp_path, folder / "kernels" / "more")
    else:
        os.mkfifo(folder / "kernels" / "pipe.h")
    with pytest.raises(OSError, match="not followed"):
        load_candidate(folder)


def test_load_candidate_reads_plain_folders_and_skips_hidden_links(tmp_path):
    folder = tmp_path / "cand"
    (folder / "kernels" / "__pycache__").mkdir(parents=True)
    (folder / "model_new.py").write_text("class ModelNew: pass\n")
    (folder / "kernels" / "a.cpp").write_text("int a;")
    os.symlink("/etc", folder / ".git")
    os.symlink("/etc/hostname", folder / "kernels" / "__pycache__" / "x.h")
    assert load_candidate(folder) == {"kernels/a.cpp": "int a;", "model_new.py": "class ModelNew: pass\n"}
    assert hostfs.is_within(folder / "kernels", folder) and not hostfs.is_within(folder / ".git", folder)
