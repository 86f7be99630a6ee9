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

from . import cache
from .compile_log import parse_errors
from .isolation import Child, Limits, run_command
from .options import EvalOptions
from .schema import CompileError, CompileResult

KERNEL_DIR = "kernels/"
HEADER_SUFFIXES = (".h", ".hpp", ".cuh", ".inc")
_INLINE_RE = re.compile(r"\bload_inline\b|\bcpp_extension\b")


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


def _validate_files(files: dict[str, str]) -> list[CompileError]:
    errors = []
    for name in files:
        if name.startswith("/") or ".." in Path(name).parts or not name:
            errors.append(
                CompileError(
                    file=name,
                    line=None,
                    column=None,
                    message="file paths must be relative and stay inside the workspace",
                )
            )
    if "model_new.py" not in files:
        errors.append(
            CompileError(
                file="model_new.py",
                line=None,
                column=None,
                message="the candidate has no model_new.py (it must define class ModelNew)",
            )
        )
        return errors
    try:
        compile(files["model_new.py"], "model_new.py", "exec")
    except SyntaxError as exc:
        errors.append(
            CompileError(file="model_new.py", line=exc.lineno, column=exc.offset, message=f"SyntaxError: {exc.msg}")
        )
    return errors


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
    for name in srcs + headers:
        path = src_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[name])
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
    meta = cache.read_json(final / "meta.json")
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
            ok = True
            for entry in reply["manifest"]:
                src = child.to_host(entry["so_path"])
                dest = staging / f"{entry['arg_hash']}{src.suffix}"
                shutil.copyfile(src, dest)
                manifest.append(
                    {
                        "name": entry["name"],
                        "arg_hash": entry["arg_hash"],
                        "file": dest.name,
                        "is_python_module": entry["is_python_module"],
                    }
                )
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
        manifest = (cache.read_json(final / "meta.json") or {}).get("manifest", manifest)
    return res, str(final) if ok else None, manifest


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
    fast, library = _fast_build(files, backend, options)
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
