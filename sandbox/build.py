"""The compile step: builds a candidate once per content hash, separate from evaluation.

Fast path: all `kernels/*.cpp` (cpu: g++ -O3 -march=native -fopenmp) or `kernels/*.cu` +
`*.cpp` (cuda: nvcc -O3 for the configured arch, linked with cuBLAS) go into ONE shared
library, loaded in the child through `kwrt`. `load_inline` candidates are imported once in a
sandboxed child with a private TORCH_EXTENSIONS_DIR; the resulting extension modules are kept
in the cache and handed to the evaluation child, which then never rebuilds. Failed builds are
cached too: resubmitting the same broken source answers instantly with the same errors.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import cache, hostfs
from .compile_log import parse_errors
from .isolation import Child, Limits, run_command
from .options import EvalOptions
from .schema import CompileError, CompileResult

KERNEL_DIR = "kernels/"
HEADER_SUFFIXES = (".h", ".hpp", ".cuh", ".inc")
_INLINE_RE = re.compile(r"\bload_inline\b|\bcpp_extension\b")

# A candidate's file names become paths on the host (written by a root parent) and in the
# children: relative, each component of these characters and not `.` or `..`, bounded.
_NAME_PART_RE = re.compile(r"[A-Za-z0-9_.-]+")
MAX_NAME_CHARS = 200
MAX_NAME_DEPTH = 8

# What the load_inline prebuild child reports (it ran the candidate's code, so it may lie):
# harness.inline_arg_hash's 32 hex digits, an extension name, a module under its ext/ folder.
_ARG_HASH_RE = re.compile(r"[0-9a-f]{32}")
_EXT_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
MAX_EXTENSIONS = 64
MAX_EXTENSION_BYTES = 1 << 30


@dataclass
class Artifacts:
    """Where the evaluation child finds what compile built."""

    library: str | None = None  # fast-path shared library
    inline_dir: str | None = None  # load_inline extension modules + manifest.json
    inline_manifest: list[dict] = field(default_factory=list)


@functools.cache
def _tool_version(tool: str) -> str:
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout
        return out.strip().splitlines()[-1] if tool == "nvcc" else out.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return f"{tool}: unavailable"


@functools.cache
def _cpu_signature() -> str:
    """-march=native builds are only valid on the same CPU model."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return cache.sha256_text(line)[:16]
    except OSError:
        pass
    return "unknown"


def _kernel_files(files: dict[str, str], backend: str) -> tuple[list[str], list[str]]:
    sources = ".cu .cpp .cc .cxx".split() if backend == "cuda" else ".cpp .cc .cxx".split()
    srcs = sorted(p for p in files if p.startswith(KERNEL_DIR) and p.endswith(tuple(sources)))
    headers = sorted(p for p in files if p.startswith(KERNEL_DIR) and p.endswith(HEADER_SUFFIXES))
    return srcs, headers


def _fast_command(backend: str, srcs: list[str], options: EvalOptions, uses_cublas: bool = False) -> list[str]:
    if backend == "cuda":
        return [
            "nvcc",
            "-O3",
            f"-arch={options.cuda_arch}",
            "-std=c++17",
            "-Xcompiler",
            "-fPIC",
            "-shared",
            "-Ikernels",
            "-o",
            "lib.so",
            *srcs,
            *(["-lcublas"] if uses_cublas else []),
        ]
    return [
        "g++",
        "-O3",
        "-march=native",
        "-fopenmp",
        "-std=c++17",
        "-fPIC",
        "-shared",
        "-Ikernels",
        "-o",
        "lib.so",
        *srcs,
    ]


class _SetupFailed(Exception):
    """Writing the candidate's files failed: a compile_error result, never a raise."""


def _shown(name: object) -> str:
    """A file name fit for a result (no NUL, no lone surrogate, bounded)."""
    ok = isinstance(name, str) and all(_NAME_PART_RE.fullmatch(p) for p in name.split("/"))
    return str(name)[:MAX_NAME_CHARS] if ok else ascii(name)[:MAX_NAME_CHARS]


def _name_problem(name: object, names: set) -> str:
    """Why `name` cannot be a file of the workspace, or ""."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS:
        return f"file paths must be text of 1 to {MAX_NAME_CHARS} characters"
    parts = name.split("/")
    if len(parts) > MAX_NAME_DEPTH:
        return f"file paths may be at most {MAX_NAME_DEPTH} folders deep"
    if any(p in (".", "..") or not _NAME_PART_RE.fullmatch(p) for p in parts):
        return (
            "file paths must be relative and stay inside the workspace: folder and file names of "
            "letters, digits, '_', '.' and '-' separated by '/' (no '.' or '..')"
        )
    clash = next(("/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) in names), "")
    return f"{clash} is both a file and a folder" if clash else ""


def _text_problem(text: object) -> str:
    if not isinstance(text, str):
        return "file contents must be text"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"the text is not valid UTF-8 (character {exc.start}: {ascii(text[exc.start])})"
    return ""


def _validate_files(files: dict[str, str]) -> list[CompileError]:
    """Names and texts that can be written as files anywhere the candidate goes (build folder,
    children), and a model_new.py that parses."""
    names = set(files)
    errors = [
        CompileError(file=_shown(name), line=None, column=None, message=why)
        for name, text in files.items()
        if (why := _name_problem(name, names) or _text_problem(text))
    ]
    if errors:
        return errors
    if "model_new.py" not in files:
        return [
            CompileError(
                file="model_new.py",
                line=None,
                column=None,
                message="the candidate has no model_new.py (it must define class ModelNew)",
            )
        ]
    try:
        compile(files["model_new.py"], "model_new.py", "exec")
    except SyntaxError as exc:
        errors.append(
            CompileError(file="model_new.py", line=exc.lineno, column=exc.offset, message=f"SyntaxError: {exc.msg}")
        )
    except ValueError as exc:  # a NUL byte (3.11)
        errors.append(CompileError(file="model_new.py", line=None, column=None, message=f"SyntaxError: {exc}"))
    return errors


def _write_sources(src_dir: Path, names: list[str], files: dict[str, str]) -> None:
    """The build's sources into its fresh folder (sandbox.hostfs: no `..`, no link followed)."""
    try:
        for name in names:
            hostfs.write_beneath(src_dir, name, files[name].encode())
    except (OSError, ValueError) as exc:
        raise _SetupFailed(f"{_shown(name)}: {exc}") from exc


def _fast_build(files: dict[str, str], backend: str, options: EvalOptions) -> tuple[CompileResult, str | None]:
    srcs, headers = _kernel_files(files, backend)
    stray_cu = [p for p in files if p.startswith(KERNEL_DIR) and p.endswith(".cu")] if backend == "cpu" else []
    if stray_cu:
        errs = [
            CompileError(
                file=p, line=None, column=None, message=".cu files need the cuda backend; on cpu write kernels/*.cpp"
            )
            for p in stray_cu
        ]
        return CompileResult(ok=False, mode="cxx", errors=errs, log="\n".join(e.message for e in errs)), None
    if not srcs:
        return CompileResult(ok=True, mode="none"), None
    tool = "nvcc" if backend == "cuda" else "g++"
    uses_cublas = any(
        "cublas" in files[p] for p in srcs + headers
    )  # link it only when used: CPU build hosts may lack it
    cmd = _fast_command(backend, srcs, options, uses_cublas)
    key = cache.sha256_text(
        "fast/1",
        tool,
        _tool_version(tool),
        " ".join(cmd),
        _cpu_signature() if backend == "cpu" else options.cuda_arch,
        cache.files_hash({p: files[p] for p in srcs + headers}),
    )
    final = cache.section(options.cache_dir, "builds") / key
    started = time.perf_counter()
    meta = cache.read_json(final / "meta.json")
    if meta is not None:
        res = CompileResult.from_dict(meta)
        res.cached, res.seconds = True, time.perf_counter() - started
        return res, str(final / "lib.so") if res.ok else None
    staging = cache.new_staging_dir(options.cache_dir, "build-")
    src_dir = staging / "src"
    src_dir.mkdir()
    try:
        _write_sources(src_dir, srcs + headers, files)
    except _SetupFailed:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    limits = Limits(
        wall_s=options.compile_timeout_s, fsize_mb=1024, nproc=4096, cpu_s=int(options.compile_timeout_s * 4) + 60
    )
    rc, log, timed_out = run_command(cmd, src_dir, limits, options)
    log = log.replace(str(src_dir) + "/", "")
    ok = rc == 0 and (src_dir / "lib.so").exists()
    if ok:
        os.replace(src_dir / "lib.so", staging / "lib.so")
    errors = [] if ok else parse_errors(log, [str(src_dir)])
    if timed_out:
        errors.insert(
            0,
            CompileError(
                file="(build)",
                line=None,
                column=None,
                message=f"compiler timed out after {options.compile_timeout_s:.0f} s",
            ),
        )
    elif not ok and not errors:
        errors.append(
            CompileError(
                file="(build)", line=None, column=None, message=f"{tool} failed with exit code {rc}; see the log"
            )
        )
    res = CompileResult(
        ok=ok,
        mode="nvcc" if backend == "cuda" else "cxx",
        artifact_key=key,
        errors=errors,
        log=f"$ {' '.join(cmd)}\n{log}",
        seconds=time.perf_counter() - started,
    )
    shutil.rmtree(src_dir, ignore_errors=True)
    cache.write_json_atomic(staging / "meta.json", _meta(res))
    cache.publish_dir(staging, final)
    return res, str(final / "lib.so") if ok else None


def _meta(res: CompileResult) -> dict:
    d = res.to_dict()
    d.pop("cached", None)
    return d


def _inline_build(
    files: dict[str, str], backend: str, options: EvalOptions
) -> tuple[CompileResult, str | None, list[dict]]:
    """Import the candidate once in a sandboxed child so load_inline builds its extension."""
    import torch

    key = cache.sha256_text(
        "inline/1",
        backend,
        torch.__version__,
        _tool_version("g++"),
        _tool_version("nvcc") if backend == "cuda" else "",
        _cpu_signature(),
        cache.files_hash(files),
    )
    final = cache.section(options.cache_dir, "builds") / key
    started = time.perf_counter()
    meta = _stored_inline(final)
    if meta is not None:
        built = meta.pop("manifest", [])
        res = CompileResult.from_dict(meta)
        res.cached, res.seconds = True, time.perf_counter() - started
        return res, str(final) if res.ok else None, built
    limits = Limits(
        wall_s=options.compile_timeout_s,
        fsize_mb=2048,
        nproc=options.max_processes,
        cpu_s=int(options.compile_timeout_s * 8) + 60,
    )
    child = Child("prebuild", limits, options, {"KW_BACKEND": backend})
    manifest: list[dict] = []
    log = ""
    ok = False
    errors: list[CompileError] = []
    transient = False  # a crash or timeout of the build child is not cached: it may not recur
    staging = cache.new_staging_dir(options.cache_dir, "inline-")
    try:
        child.write_files(files)
        child.send({"options": {**options.to_dict(), "_threads": options.threads()}, "backend": backend})
        reply = child.recv()
        log = reply.get("log", "")
        if reply.get("ok"):
            child.kill()  # nothing of the candidate's runs while its modules are copied out
            try:
                manifest, ok = _collect_extensions(child, reply.get("manifest"), staging), True
            except (_BadManifest, OSError, ValueError) as exc:
                _empty(staging)
                errors.append(CompileError(file="model_new.py", line=None, column=None, message=f"load_inline: {exc}"))
        else:
            errors = parse_errors(
                log,
                [str(child.workdir / "ext"), str(child.workdir), f"{child.inside_root}/ext", str(child.inside_root)],
            )
            if not errors:
                errors.append(
                    CompileError(
                        file=reply.get("file", "model_new.py"),
                        line=reply.get("line"),
                        column=None,
                        message=reply.get("error", "load_inline build failed"),
                    )
                )
    except Exception as exc:  # the child died or timed out: the build failed, we did not
        transient = True
        timed_out = time.monotonic() >= child.deadline
        how = f"timed out after {options.compile_timeout_s:.0f} s" if timed_out else child.exit_description()
        errors.append(
            CompileError(
                file="model_new.py",
                line=None,
                column=None,
                message=f"building the load_inline extension failed: {how} ({type(exc).__name__})",
            )
        )
        log = child.log_tail(20000)
    finally:
        log = (log + "\n" + child.log_tail(20000)).strip()
        child.close()
    res = CompileResult(
        ok=ok, mode="load_inline", artifact_key=key, errors=errors, log=log, seconds=time.perf_counter() - started
    )
    if transient:
        shutil.rmtree(staging, ignore_errors=True)
        return res, None, []
    meta = _meta(res)
    meta["manifest"] = manifest
    cache.write_json_atomic(staging / "meta.json", meta)
    if not cache.publish_dir(staging, final):
        winner = _stored_inline(final)
        if winner is None:  # a bad entry got there first: not this build's result to cache
            return res, None, []
        manifest = winner.get("manifest", manifest)
    return res, str(final) if ok else None, manifest


class _BadManifest(Exception):
    """The prebuild child reported an extension module that cannot be one of its build's."""


def _manifest_entry(entry: object) -> tuple[dict, str]:
    """One entry the prebuild child sent, every field checked (red-team a7: an `arg_hash` or
    `so_path` with `..` wrote and read host files): (the entry to store, its so_path)."""
    if not isinstance(entry, dict):
        raise _BadManifest("a manifest entry is not an object")
    name, arg_hash, so_path, is_py = (entry.get(k) for k in ("name", "arg_hash", "so_path", "is_python_module"))
    if not (isinstance(name, str) and _EXT_NAME_RE.fullmatch(name)):
        raise _BadManifest(f"unusable extension name {ascii(name)[:80]}")
    if not (isinstance(arg_hash, str) and _ARG_HASH_RE.fullmatch(arg_hash)):
        raise _BadManifest(f"{name}: not a build hash: {ascii(arg_hash)[:80]}")
    if not isinstance(is_py, bool):
        raise _BadManifest(f"{name}: is_python_module is not true or false")
    if not (isinstance(so_path, str) and so_path.endswith(".so")):
        raise _BadManifest(f"{name}: the build reported no extension module (.so)")
    return {"name": name, "arg_hash": arg_hash, "file": f"{arg_hash}.so", "is_python_module": is_py}, so_path


def _copy_extension(child: Child, so_path: str, dest: Path) -> None:
    """The built module out of the child's ext/ folder (TORCH_EXTENSIONS_DIR) only: resolved
    inside it, opened without following links, a regular file of bounded size."""
    rel = child.to_host(so_path).relative_to(os.path.realpath(child.workdir)).as_posix()
    if not rel.startswith("ext/"):
        raise _BadManifest(f"{so_path} is not in the extensions folder")
    fd = hostfs.open_beneath(child.workdir, rel)
    try:
        hostfs.copy_fd(fd, dest, MAX_EXTENSION_BYTES)
    finally:
        os.close(fd)


def _collect_extensions(child: Child, reported: object, staging: Path) -> list[dict]:
    """The manifest to store, each module copied into `staging` as <arg_hash>.so."""
    if not isinstance(reported, list) or len(reported) > MAX_EXTENSIONS:
        raise _BadManifest(f"the build reported no list of at most {MAX_EXTENSIONS} extension modules")
    manifest: list[dict] = []
    for entry, so_path in map(_manifest_entry, reported):
        if all(e["arg_hash"] != entry["arg_hash"] for e in manifest):  # the same call twice: one module
            _copy_extension(child, so_path, staging / entry["file"])
            manifest.append(entry)
    return manifest


def _stored_inline(final: Path) -> dict | None:
    """A cached load_inline build's meta, or None; an entry whose manifest would not pass today's
    checks (stored before them, red-team a7) is removed so that it is built again."""
    meta = cache.read_json(final / "meta.json")
    if meta is None:
        return None
    stored = meta.get("manifest")
    try:
        valid = isinstance(stored, list) and all(_manifest_entry({**e, "so_path": "x.so"})[0] == e for e in stored)
    except (_BadManifest, TypeError):
        valid = False
    if not valid:
        _discard(final)
        return None
    return meta


def _discard(entry: Path) -> None:
    """A cache entry out of the way at once (one rename), then removed."""
    trash = Path(f"{entry}.bad-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.rename(entry, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def _empty(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()


def uses_inline(files: dict[str, str]) -> bool:
    return any(name.endswith(".py") and _INLINE_RE.search(text) for name, text in files.items())


def build(files: dict[str, str], options: EvalOptions) -> tuple[CompileResult, Artifacts]:
    """compile_candidate plus where the artifacts are; never raises for candidate faults."""
    backend = options.resolved_backend()
    started = time.perf_counter()
    errors = _validate_files(files)
    if errors:
        return CompileResult(
            ok=False,
            mode="none",
            errors=errors,
            log="\n".join(f"{e.file}:{e.line or ''}: {e.message}" for e in errors),
            artifact_key=cache.files_hash(files),
        ), Artifacts()
    try:
        fast, library = _fast_build(files, backend, options)
    except _SetupFailed as exc:
        why = f"the candidate's files could not be set up: {exc}"
        return CompileResult(
            ok=False,
            mode="none",
            errors=[CompileError(file="(build)", line=None, column=None, message=why)],
            log=why,
            artifact_key=cache.files_hash(files),
        ), Artifacts()
    artifacts = Artifacts(library=library)
    results = [fast]
    if fast.ok and uses_inline(files):
        inline, inline_dir, manifest = _inline_build(files, backend, options)
        artifacts.inline_dir, artifacts.inline_manifest = inline_dir, manifest
        results.append(inline)
    used = [r for r in results if r.mode != "none"] or [fast]
    combined = CompileResult(
        ok=all(r.ok for r in results),
        cached=all(r.cached for r in used),
        seconds=time.perf_counter() - started,
        mode="+".join(r.mode for r in used),
        artifact_key=cache.sha256_text(*[r.artifact_key for r in used])
        if len(used) > 1
        else (used[0].artifact_key or cache.files_hash(files)),
        errors=[e for r in results for e in r.errors],
        log="\n".join(r.log for r in used if r.log),
    )
    return combined, artifacts


def manifest_json(artifacts: Artifacts) -> str:
    return json.dumps(artifacts.inline_manifest)
