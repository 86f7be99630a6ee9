"""sandbox.audit_hook: what candidate code is refused at run time, whatever it is spelled as, and
what the harness and the standard library may still do. A hook cannot be removed, so each check
runs in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CANDIDATE = """
import collections, gc, importlib, sys, typing

def traceback_frame():
    try:
        raise LookupError
    except LookupError as e:
        return getattr(e.__traceback__, "tb_" + "frame")

def own_frame():
    return getattr(sys, "_get" + "frame")()

def inspect_frame():
    import inspect
    return inspect.currentframe()

def every_object():
    return gc.get_objects()

def libc():
    import ctypes
    return ctypes.CDLL(None)

def libc_by_bare_name():
    import ctypes
    return ctypes.CDLL("libc.so.6")

def python_api():
    import ctypes
    return ctypes.pythonapi.PyEval_GetFrame

def proc_maps():
    return open("/proc/self/maps").read()

def harness_named_code():
    return compile("1", SANDBOX + "/timing.py", "eval")

def frozen_named_code():
    return compile("1", "<frozen os>", "eval")

def new_code_object():
    return own.__code__.replace(co_filename=SANDBOX + "/timing.py")

def sourceless_bytecode():
    open(HERE + "/m.pyc", "wb").close()

def bytecode():
    import marshal
    return marshal.loads(marshal.dumps(1))

def harness_code_rewrite():
    f = importlib.import_module("sandbox.timing").summarize
    f.__defaults__ = ()

def rebound_module_state():
    hook = sys.modules["sandbox.audit_hook"]
    hook._WATCHED, hook._REFUSED, hook.TRUSTED, hook.UNTRUSTED = frozenset(), frozenset(), 2, 0
    return own_frame()

def proc_by_another_spelling():
    return open("//proc/./self/maps").read()

class Sneaky:
    def __fspath__(self):
        return "/proc/self/maps"

def proc_by_path_object():
    return open(Sneaky()).read()

def thread_frames():
    import itertools, threading
    got = []
    t = threading.Timer(0.0, got.extend, (itertools.starmap(sys._current_frames, [()]),))
    t.start()
    t.join()
    if not got:
        raise PermissionError("refused in the thread")
    return got

def code_it_compiled():
    ns = {}
    exec("def g():" + chr(10) + "    import sys" + chr(10) + "    return sys._getframe()" + chr(10), ns)
    return ns["g"]()

def named_tuple_and_type_var():
    return collections.namedtuple("P", "a b")(1, 2), typing.TypeVar("T")

def typing_aliases():
    from typing import Optional, Tuple, Union

    import typing_extensions

    return Union[int, Tuple[int, int]], Optional[Tuple[bytes, float]], typing_extensions.Literal["x", "y"]

def fx_wrapped_helper():
    import wrapped  # a module whose top level does what upstream model code does: @torch.fx.wrap

    return wrapped.rotate(2)

def logging_a_warning():
    import logging

    logging.getLogger("kw-audit-hook-test").warning("a candidate may log")

def own():
    return 1

def own_code_rewrite():
    own.__defaults__ = ()
    return own()

def torch_probes_nvml():
    import torch

    try:  # torch.cuda.device_count() asks NVML by a bare name: CDLL("libnvidia-ml.so.1")
        torch.cuda._raw_device_count_nvml()
    except PermissionError:
        raise
    except OSError:
        pass  # no NVIDIA driver here: the library is missing, and loading it was allowed

def installed_source_without_bytecode():
    import importlib.util, tempfile

    sys.pycache_prefix = tempfile.mkdtemp()  # no .pyc to be found: the import compiles the source
    try:
        spec = importlib.util.find_spec("fractions")
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    finally:
        sys.pycache_prefix = None

def installed_name_forgery():
    import fractions
    return compile("import sys" + chr(10) + "f = sys._getframe()", fractions.__file__, "exec")

def libc_through_torch_cuda():
    # red team 2026-12-06: torch/cuda/__init__.py was trusted for ctypes as a file, and one of
    # its functions calls whatever it wraps
    import ctypes, torch
    wrap = torch.cuda._WrappedTritonKernel
    return wrap(getattr)(wrap(ctypes.CDLL)("libc.so.6"), "system")

def libc_through_torch_cuda_device():
    import ctypes, torch
    torch.cuda._exchange_device = ctypes.CDLL
    d = torch.cuda.device(None)
    d.idx = "libc.so.6"
    d.__enter__()
    return d.prev_idx

def origin_expanded_library():
    # glibc expands $ORIGIN to _ctypes' folder; the hook resolved "$ORIGIN" as a folder under the
    # working directory: from deep inside an installed package, the name it judged was installed
    import _ctypes, ctypes, os, torch
    up = os.path.dirname(_ctypes.__file__).count("/")  # from _ctypes' folder to /
    packages = os.path.dirname(os.path.dirname(torch.__file__))
    deep = next(d for d, _, _ in os.walk(os.path.dirname(torch.__file__)) if d.count("/") - packages.count("/") == up - 1)
    os.chdir(deep)
    try:
        torch.cuda._WrappedTritonKernel(ctypes.CDLL)("$ORIGIN/" + "../" * up + HERE.lstrip("/") + "/lib")
    except PermissionError:
        raise
    except OSError:
        pass  # allowed: glibc looked for the candidate's file
    finally:
        os.chdir(HERE)

def dotdot_installed_name():
    import os
    text = "import sys" + chr(10) + "FRAME = sys._getframe(1)" + chr(10)
    open(HERE + "/evil_mod.py", "w").write(text)
    neutral = os.path.dirname(os.__file__) + "/"
    g = {}
    exec(compile(text, neutral + "../" * neutral.count("/") + HERE.lstrip("/") + "/evil_mod.py", "exec"), g)
    return g["FRAME"]

def installed_module_run_with_own_builtins():
    # sched.py's top level runs `_sentinel = object()`; its own text, compiled under its name
    import builtins, sched
    mine = dict(vars(builtins))
    mine["object"] = sys._current_frames
    g = {"__builtins__": mine, "__name__": "x"}
    exec(compile(open(sched.__file__).read(), sched.__file__, "exec"), g)
    return g["_sentinel"]

def installed_module_bytecode_seeded_with_gc():
    import builtins, importlib.util
    code = importlib.util.find_spec("sched").loader.get_code("sched")
    mine = dict(vars(builtins))
    mine["object"] = gc.get_objects
    g = {"__builtins__": mine, "__name__": "x"}
    exec(code, g)
    return g["_sentinel"]

def logging_current_frame():
    # logging's `currentframe = lambda: sys._getframe(1)`: logging reads names through frames,
    # this function of it hands the frame back
    import logging
    return logging.currentframe()

def module_name_rebound_to_getframe():
    # secrets' top level runs `_sysrand = SystemRandom()`, bound from random at its import
    import random, secrets
    real = random.SystemRandom
    random.SystemRandom = getattr(sys, "_get" + "frame")
    try:
        importlib.reload(secrets)
    except AttributeError:
        pass  # its next line reads an attribute of what it got; `_sysrand` is bound by then
    finally:
        random.SystemRandom = real
    return secrets._sysrand

def module_name_rebound_to_inspect_stack():
    import inspect, random, secrets
    real = random.SystemRandom
    random.SystemRandom = inspect.stack
    try:
        importlib.reload(secrets)
    except AttributeError:
        pass
    finally:
        random.SystemRandom = real
    return secrets._sysrand

def _sched_run_with(obj):
    # sched's top level runs `_sentinel = object()`: its own bytecode, real builtins, and
    # `object` found first in the module globals the candidate seeded
    import importlib.util
    code = importlib.util.find_spec("sched").loader.get_code("sched")
    g = {"__name__": "x", "object": obj}
    exec(code, g)
    return g["_sentinel"]

def seeded_compile_under_harness_name():
    import functools
    src = chr(10).join(["import sys", "F = sys._getframe(0)", ""])
    return _sched_run_with(functools.partial(compile, src, SANDBOX + "/timing.py", "exec"))

def seeded_compile_under_installed_name():
    import functools, json
    src = chr(10).join(["import sys", "def g():", "    return sys._getframe(1)", "F = g()", ""])
    return _sched_run_with(functools.partial(compile, src, json.__file__, "exec"))

def seeded_harness_code_rewrite():
    import functools
    harness_fn = sys.modules["sandbox.audit_hook"]._text
    return _sched_run_with(functools.partial(setattr, harness_fn, "__code__", own.__code__))

def stdlib_import():
    import json.tool, fractions
    return fractions.Fraction(1, 3)
"""

DRIVER = """
import json, os, sys
sys.path.insert(0, {root!r})
from sandbox.audit_hook import install
take = install([{cand!r}], [])
sys.path.insert(0, {cand!r})
import candidate
candidate.SANDBOX, candidate.HERE = {sandbox!r}, {cand!r}
out = {{}}
for name in {names!r}:
    try:
        getattr(candidate, name)()
        out[name] = "allowed"
    except PermissionError as exc:
        out[name] = "refused: " + str(exc)
out["record"] = take()
print(json.dumps(out))
"""

REFUSED = [
    "traceback_frame",
    "own_frame",
    "inspect_frame",
    "every_object",
    "libc",
    "libc_by_bare_name",
    "python_api",
    "proc_maps",
    "harness_named_code",
    "frozen_named_code",
    "installed_name_forgery",
    "libc_through_torch_cuda",
    "libc_through_torch_cuda_device",
    "origin_expanded_library",
    "dotdot_installed_name",
    "installed_module_run_with_own_builtins",
    "installed_module_bytecode_seeded_with_gc",
    "logging_current_frame",
    "seeded_compile_under_harness_name",
    "seeded_compile_under_installed_name",
    "seeded_harness_code_rewrite",
    "module_name_rebound_to_getframe",
    "module_name_rebound_to_inspect_stack",
    "new_code_object",
    "sourceless_bytecode",
    "bytecode",
    "harness_code_rewrite",
    "rebound_module_state",
    "proc_by_another_spelling",
    "proc_by_path_object",
    "thread_frames",
    "code_it_compiled",
]
ALLOWED = [
    "named_tuple_and_type_var",
    "own_code_rewrite",
    "stdlib_import",
    "typing_aliases",
    "fx_wrapped_helper",
    "logging_a_warning",
    "torch_probes_nvml",
    "installed_source_without_bytecode",
]

WRAPPED = """import torch
import torch.fx


@torch.fx.wrap
def rotate(x):
    return x + 1
"""


def _run(tmp_path: Path) -> dict:
    import json

    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "candidate.py").write_text(CANDIDATE)
    (cand / "wrapped.py").write_text(WRAPPED)
    driver = tmp_path / "driver.py"
    driver.write_text(
        DRIVER.format(root=str(ROOT), cand=str(cand), sandbox=str(ROOT / "sandbox"), names=REFUSED + ALLOWED)
    )
    # the driver is neither harness nor installed code: each call is judged by the candidate's
    # frame nearest to the event, as in the worker
    proc = subprocess.run([sys.executable, str(driver)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_candidate_code_is_refused_frames_objects_native_code_and_code_it_names_itself(tmp_path):
    out = _run(tmp_path)
    for name in REFUSED:
        assert out[name].startswith("refused"), (name, out[name])
    for name in ALLOWED:
        assert out[name] == "allowed", (name, out[name])
    assert len(out["record"]) >= len(REFUSED), out["record"]
    assert any("tb_frame" in r for r in out["record"])


def test_harness_code_keeps_frames_and_tracebacks(tmp_path):
    """Code under sandbox/ (here: the hook's own module calling back) may format a traceback
    raised by candidate code: tracebacks of candidate errors are how results explain themselves."""
    script = textwrap.dedent(
        f"""
        import sys, traceback
        sys.path.insert(0, {str(ROOT)!r})
        from sandbox import audit_hook
        from sandbox.harness import where
        take = audit_hook.install([{str(tmp_path)!r}], [])
        sys.path.insert(0, {str(tmp_path)!r})
        open({str(tmp_path / "bad.py")!r}, "w").write("def f():\\n    raise ValueError('x')\\n")
        import bad
        try:
            bad.f()
        except ValueError as exc:
            print(where(exc, [{str(tmp_path)!r} + "/"]))
        print("record", take())
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bad.py" in proc.stdout and "record []" in proc.stdout, proc.stdout


def test_a_bare_library_name_is_the_linkers_only_while_its_search_path_is_out_of_reach(monkeypatch):
    from sandbox.audit_hook import _linker_search_is_fixed

    for unsafe in ("/tmp/libs", "libs", "/usr/lib::/opt", "/work/cand/lib"):
        monkeypatch.setenv("LD_LIBRARY_PATH", unsafe)
        assert not _linker_search_is_fixed(("/work/cand/",)), unsafe
    for safe in ("/usr/local/nvidia/lib64:/usr/lib", None):
        if safe is None:
            monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
        else:
            monkeypatch.setenv("LD_LIBRARY_PATH", safe)
        assert _linker_search_is_fixed(("/work/cand/",)), safe
