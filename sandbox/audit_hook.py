"""A CPython audit hook (PEP 578) in the candidate's process: what candidate code may not do at
run time, however it is spelled.

The static scan (audit.scan_source) reads names, and a name built at run time hides from it:
the red team of 2026-12-06 reached the timer's list of times through an exception's traceback
(`getattr(e.__traceback__, "tb_" + "frame")`, then `f_back` up to `Timer.block`) and divided
the recorded times by 1000 for a reward of 2. Every way Python code gets hold of a frame, of
every object (gc), of native symbols or raw memory (ctypes' dlopen, dlsym, from_address), of
new code objects, or of another process raises an audit event before it happens; this hook
refuses those events when candidate code asked for them.

Who asked: the nearest frame, going outward from the event, that is neither the standard
library nor an installed package (torch calling sys._getframe for its own reasons is neither
candidate nor harness, so the frame that called torch decides), unless an installed module's
own import-time code comes first (torch's lazy imports, however a candidate's import set them
off). A frame of the harness (sandbox/, kwrt) is trusted; any other file is candidate code, and
so is code compiled at run time (`<string>`, `<...>`) when candidate code compiled it. A stack
with neither, in a thread other than the main one, is a thread candidate code started. Code
cannot claim a trusted or installed file name (`<frozen ...>` included): compiling code under
such a name, or building a code object, is itself refused to candidate code.

A refused event raises PermissionError in the candidate and is remembered; the harness reads
the record through the function `install` returns (audit.Integrity reports each as tampering,
so a candidate that caught the error is rejected all the same). Nothing here is reachable from
a module global: the state lives in the hook's closure, and the hook is reachable only through
frames, which are refused.

Not a wall against native code (PEP 578 says as much): a built library can read and write the
process's memory without an event. docs/security.md lists what stands behind this.
"""

from __future__ import annotations

import ast
import builtins
import ctypes
import os
import sys
import sysconfig
import threading
import types
from collections.abc import Callable

# always refused to candidate code
_REFUSED = frozenset(
    {
        "sys._getframe",
        "sys._current_frames",
        "sys._current_exceptions",
        "sys.settrace",
        "sys.setprofile",
        "sys.addaudithook",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "code.__new__",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.dlsym/handle",
        "ctypes.cdata",
        "ctypes.cdata/buffer",
        "ctypes.string_at",
        "ctypes.wstring_at",
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "subprocess.Popen",
        "pty.spawn",
        "socket.__new__",
        "mmap.__new__",
    }
)
# what an installed module's code at its import may do with a candidate's frame beneath it
# (torch's lazy imports: dataclasses and namedtuples it compiles, decorators rewriting their
# functions' defaults, a module-level sys._getframe), measured 2026-12-06; nothing that hands out
# every frame or object, native symbols, or a process; each narrowed further in `import_pass`
_IMPORT_TIME_EVENTS = frozenset({"compile", "object.__setattr__", "object.__delattr__", "sys._getframe"})
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_CODE_ATTRS = frozenset({"__code__", "__defaults__", "__kwdefaults__", "__globals__"})
# events whose arguments decide (see `_judge`)
_WATCHED = _REFUSED | {
    "object.__getattr__",
    "object.__setattr__",
    "object.__delattr__",
    "open",
    "os.rename",
    "os.link",
    "os.symlink",
    "import",
    "compile",
    "marshal.load",
    "marshal.loads",
}
# files that, written by candidate code, would load as code under a name of its choosing
# (sourceless bytecode keeps the file name it was compiled with) or as native code
_LOADABLE = (".pyc", ".so")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

TRUSTED, NEUTRAL, UNTRUSTED = 0, 1, 2
_SYSTEM_LIBS = ("/usr/lib", "/lib", "/usr/local/cuda", "/usr/local/lib")  # read-only in the sandbox


def _neutral_prefixes() -> tuple[str, ...]:
    """Folders of the standard library and installed packages (read-only in the sandbox)."""
    paths = sysconfig.get_paths()
    found = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    found |= {p for p in sys.path if p and "-packages" in p}
    return tuple(sorted({os.path.join(os.path.realpath(p), "") for p in found}))


def _stdlib_prefixes() -> tuple[str, ...]:
    """Folders of the standard library alone."""
    return tuple(sorted({os.path.join(os.path.realpath(sysconfig.get_path(k)), "") for k in ("stdlib", "platstdlib")}))


def _text(x: object) -> str | None:
    """An event's path or name as text, without running any code of the candidate's (a path
    given as another object, whose __fspath__ or __str__ would run inside the hook, is None)."""
    if type(x) is bytes:
        return x.decode(errors="replace")
    return x if type(x) is str else None


def _allowed_callers() -> dict[str, frozenset]:
    """Code allowed an event wherever it is called from, judged on the frame that called it
    (ctypes' own frames passed over). The import system reading a .pyc file
    (`_compile_bytecode`; a .pyc keeps whatever file name it was compiled with, so candidate code
    may not write one: `_LOADABLE`). torch.cuda's NVML probes, which load one fixed library by a
    fixed bare name and look up fixed symbols in it, handing no handle out: torch asks NVML for
    the device count (`CDLL("libnvidia-ml.so.1")`) whenever a count is wanted and CUDA is not
    initialised in the process, so any candidate that touches the device API sets it off.
    Trusted by code object, not by file: other functions of torch/cuda/__init__.py call whatever
    callable they are given (red team 2026-12-06: `_WrappedTritonKernel(ctypes.CDLL)("libc.so.6")`).
    Frame reads for a name are `_name_reader_files`'."""
    import importlib._bootstrap_external as external

    allowed = {"marshal.loads": frozenset({external._compile_bytecode.__code__})}  # type: ignore[attr-defined]
    try:
        import torch.cuda
    except ImportError:
        return allowed
    probes = (getattr(torch.cuda, n, None) for n in ("_raw_device_count_nvml", "_raw_device_uuid_nvml"))
    codes = frozenset(f.__code__ for f in probes if f is not None)
    return allowed | {event: codes for event in ("ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle")}


def _name_reader_files() -> frozenset[str]:
    """Modules whose code calls sys._getframe (itself or through inspect.currentframe) only to
    read a caller's module name or globals, and hands no frame out: typing and typing_extensions
    (building an alias of a generic: `Optional[Tuple[Tensor]]` in an annotation), collections
    and enum (a named tuple's or enum's module), logging (the caller's file and line) and
    torch.fx's `wrap` (registers a function in its caller's globals). An upload's code uses
    them at import, so a candidate that keeps the reference's code does too."""
    import collections
    import enum
    import logging
    import typing

    modules: list = [collections, enum, logging, typing]
    for name in ("typing_extensions", "torch.fx._symbolic_trace"):
        try:
            modules.append(__import__(name, fromlist=["_"]))
        except ImportError:
            pass
    return frozenset(os.path.realpath(m.__file__) for m in modules if getattr(m, "__file__", None))


def _frame_passers() -> frozenset:
    """Code that returns its caller's frame as it got it (inspect.currentframe, logging's
    currentframe): whoever called it receives the frame, and is judged as if it had called
    sys._getframe itself (red team 2026-12-06, round 6: `logging.currentframe()` from candidate
    code was judged by logging's file, a name reader, and handed the candidate its frame)."""
    import inspect
    import logging

    return frozenset(f.__code__ for f in (inspect.currentframe, logging.currentframe))


def _linker_search_is_fixed(untrusted: tuple[str, ...]) -> bool:
    """Whether a library named without a slash can only come from where candidate code cannot
    write. glibc reads LD_LIBRARY_PATH once, at start-up (a later os.environ change does not
    move the search), then its cache and the system folders, never the working directory; an
    entry that is relative, empty (the working directory), under the candidate's folders or
    under /tmp would let a file the candidate wrote answer the name."""
    search = os.environ.get("LD_LIBRARY_PATH")
    for entry in search.split(":") if search else []:
        if not os.path.isabs(entry):
            return False
        where = os.path.join(os.path.realpath(entry), "")
        if where.startswith(untrusted) or where.startswith(("/tmp/", "/var/tmp/", "/dev/shm/")):
            return False
    return True


def install(untrusted_roots: list[str], libraries: list[str]) -> Callable[[], list[str]]:
    """Install the hook (once per process: hooks cannot be removed) and return a function that
    hands over the refusals recorded since it was last called. `untrusted_roots`: folders of
    candidate code (they win over the neutral folders, should one lie inside another).
    `libraries`: the built kernels (files or folders) that harness code may load with ctypes
    besides installed and system libraries; candidate code loads none itself."""
    trusted = (os.path.join(os.path.dirname(os.path.realpath(__file__)), ""),)
    neutral = _neutral_prefixes()
    untrusted = tuple(os.path.join(os.path.realpath(r), "") for r in untrusted_roots)
    loadable = tuple(os.path.realpath(x) for x in libraries) + neutral + _SYSTEM_LIBS
    bare_names_found_safely = _linker_search_is_fixed(untrusted)
    # everything the hook reads is bound here: the module's globals are within candidate code's
    # reach (sys.modules), the hook's closure is not
    getframe, get_ident, realpath, text = sys._getframe, threading.get_ident, os.path.realpath, _text
    startswith = str.startswith
    refused_always, watched, frame_attrs, code_attrs = _REFUSED, _WATCHED, _FRAME_ATTRS, _CODE_ATTRS
    loadable_suffixes, write_flags = _LOADABLE, _WRITE_FLAGS
    trusted_kind, neutral_kind, untrusted_kind = TRUSTED, NEUTRAL, UNTRUSTED
    kinds: dict[object, int] = {}  # code object -> TRUSTED / NEUTRAL / UNTRUSTED
    made_by_candidate: set[str] = set()  # <...> names of code that candidate code compiled
    main_thread = threading.main_thread().ident
    refusals: list[str] = []
    busy: set[int] = set()  # threads inside the hook (a thread's own events there are the hook's)
    allowed = _allowed_callers()
    reader_files, passers = _name_reader_files(), _frame_passers()
    stdlib = _stdlib_prefixes()
    ctypes_folder = os.path.join(os.path.dirname(os.path.realpath(ctypes.__file__)), "")
    real_builtins, import_time_events = builtins.__dict__, _IMPORT_TIME_EVENTS
    ast_parse = ast.parse.__code__
    sys.dont_write_bytecode = True  # the import system writes no .pyc for candidate modules

    def kind_of_file(name: str) -> int:
        if startswith(name, "<"):  # code compiled at run time: the candidate's if it compiled it
            return untrusted_kind if name in made_by_candidate else neutral_kind
        if startswith(name, untrusted):
            return untrusted_kind
        if startswith(name, trusted):
            return trusted_kind
        if startswith(name, neutral):
            return neutral_kind
        return untrusted_kind  # /tmp, the work folder, anything the candidate could have written

    def receiver(f: types.FrameType | None) -> types.FrameType | None:
        """The frame whose code gets what sys._getframe returns: the caller, past `passers`."""
        while f is not None and f.f_code in passers:
            f = f.f_back
        return f

    def may_have_frame_at_import(f: types.FrameType) -> bool:
        """Whether this receiver may have a frame when an installed module's import set the call
        off: not the module's own top-level code, nor the standard library's (candidate code can
        rebind a name that code calls at import: `random.SystemRandom = sys._getframe`, then
        reloading secrets bound `_sysrand` to a frame, red team 2026-12-06, round 6); torch's own
        functions reading a frame at its lazy imports may."""
        return f.f_code.co_name != "<module>" and not startswith(f.f_code.co_filename, stdlib)

    def rewritten_code(args: tuple) -> types.CodeType | None:
        """For object.__setattr__/__delattr__: the code of the function whose code, defaults or
        globals would change, or None for any other attribute."""
        return getattr(args[0], "__code__", None) if args[1] in code_attrs else None

    def import_pass(event: str, args: tuple, f: types.FrameType | None, to: types.FrameType | None) -> bool:
        """Whether an installed module's import-time code may do this (`_IMPORT_TIME_EVENTS`). Never
        to the harness, whatever ran the module's code (red team 2026-12-06, round 7: an installed
        module's code run in a dict seeded with `object = partial(compile, src, "sandbox/timing.py",
        "exec")` made code under a harness name): a compile at import only as `ast.parse` (a syntax
        tree runs nothing: torch.jit reading a function's source), a function's code or defaults
        rewritten only where the function is not the harness's, a frame only to a receiver `to`
        that may have one (`may_have_frame_at_import`)."""
        if event == "compile":
            return f is not None and f.f_code is ast_parse
        if event in ("object.__setattr__", "object.__delattr__"):
            code = rewritten_code(args)
            return code is None or kind_of_file(code.co_filename) != trusted_kind
        if event == "sys._getframe":
            return to is not None and may_have_frame_at_import(to)
        return True

    def asker(event: str, args: tuple = ()) -> int:
        """TRUSTED or UNTRUSTED: the nearest frame outside the standard library and packages."""
        f: types.FrameType | None = getframe(2)  # past asker and hook: the frame whose operation raised the event
        caller = f
        while caller is not None and startswith(caller.f_code.co_filename, ctypes_folder):
            caller = caller.f_back
        if caller is not None and caller.f_code in allowed.get(event, ()):
            return trusted_kind  # code that needs the event for its own ends (_allowed_callers)
        to = receiver(f) if event == "sys._getframe" else None
        if to is not None and to.f_code.co_filename in reader_files:
            return trusted_kind  # reads a name through the frame and drops it (_name_reader_files)
        at_import = event in import_time_events and import_pass(event, args, f, to)
        while f is not None:
            code = f.f_code
            k = kinds.get(code)
            if k is None:
                k = kind_of_file(code.co_filename)
                if not startswith(code.co_filename, "<"):  # <...> names turn untrusted later
                    kinds[code] = k
            if k != neutral_kind:
                return k
            if (
                code.co_name == "<module>"
                and not startswith(code.co_filename, "<")
                and at_import
                and f.f_builtins is real_builtins
            ):
                # an installed module's own code at its import (torch's lazy imports); run by
                # candidate code with builtins of its own, `object` could be sys._current_frames
                return trusted_kind
            f = f.f_back
        # the interpreter's own start-up; in any other thread, a thread candidate code started
        # with a standard-library target (red team 2026-12-06: threading.Timer over
        # sys._current_frames, with no candidate frame on its stack)
        return trusted_kind if get_ident() == main_thread else untrusted_kind

    def refused(event: str, args: tuple) -> str | None:
        """Why the event is refused to candidate code, or None."""
        if event in refused_always:
            return event
        if event == "object.__getattr__":
            return f"reading {args[1]}" if args[1] in frame_attrs else None
        if event in ("object.__setattr__", "object.__delattr__"):
            code = rewritten_code(args)
            if code is None or kind_of_file(code.co_filename) == untrusted_kind:
                return None  # the candidate's own functions
            return f"rewriting {args[1]} of {getattr(args[0], '__qualname__', '?')}"
        if event == "open":
            if type(args[0]) is int:
                return None  # a descriptor it holds already
            path, mode, flags = text(args[0]), args[1], args[2]
            if path is None:
                return "opening a path given as an object"
            if startswith(realpath(path), "/proc/"):
                return f"opening {path}"
            writes = (type(flags) is int and flags & write_flags) or (
                type(mode) is str and any(c in mode for c in "wax+")
            )
            return f"writing {path}" if writes and realpath(path).endswith(loadable_suffixes) else None
        if event in ("os.rename", "os.link", "os.symlink"):
            dst = text(args[1])
            return f"{event} to {dst}" if dst is None or dst.endswith(loadable_suffixes) else None
        if event == "import":
            module, path = text(args[0]) or "", args[1]
            if module == "sandbox" or startswith(module, "sandbox."):
                return f"importing {module}"
            where = text(path) if path is not None else ""
            if where is None or (where and kind_of_file(where) == untrusted_kind):
                return f"loading native module {module} from {where}"
            return None
        if event in ("marshal.load", "marshal.loads"):
            return event  # the import system's own reading of .pyc files is let through in `asker`
        if event == "compile":
            name = text(args[1])
            if name is None or startswith(name, "<") and not startswith(name, "<frozen"):
                return None  # named by `hook` as the candidate's where candidate code compiles it
            kind = kind_of_file(name)
            if kind == untrusted_kind:
                return None  # a name of the candidate's own
            if kind == neutral_kind and realpath(name) == name and is_the_file(args[0], name):
                return None  # an installed file's own text under its resolved name (no .pyc)
            return f"compiling code named {name}"  # a harness name, a forgery, or `..` and links
        return None

    def is_the_file(source: object, name: str) -> bool:
        """Whether `source` is the text of the file `name`: what the import system compiles for
        an installed module that has no bytecode cache (a read-only site-packages, a package
        installed without compiling). Code under an installed name with any other text is a
        forgery; harness names get no such pass (importing sandbox is refused outright)."""
        if type(source) is str:
            source = source.encode()
        if type(source) is not bytes:
            return False
        try:
            with open(name, "rb") as fh:
                return fh.read() == source
        except OSError:
            return False

    def foreign_library(event: str, args: tuple) -> str | None:
        """A library loaded from anywhere but the build, installed packages or the system: the
        harness loads nothing else on anyone's behalf (kwrt's path comes from its environment).
        A bare name (torch's `CDLL("libnvidia-ml.so.1")` on CUDA) is the dynamic linker's to
        find, in search paths fixed when the process started (`_linker_search_is_fixed`)."""
        if event != "ctypes.dlopen" or args[0] is None:
            return None
        name = text(args[0])
        if name is None:
            return "loading a library named by an object"
        if "$" in name:  # glibc expands $ORIGIN, $LIB, $PLATFORM: the path is not the one judged here
            return f"loading {name}"
        if "/" not in name and bare_names_found_safely:
            return None
        path = realpath(name)
        return None if startswith(path, loadable) else f"loading {path}"

    def hook(event: str, args: tuple) -> None:
        if event not in watched:
            return
        me = get_ident()
        if me in busy:
            return
        busy.add(me)
        try:
            if event == "compile":
                name = text(args[1])
                frozen = name is not None and startswith(name, "<frozen")  # refused below instead
                if name is not None and startswith(name, "<") and not frozen and asker(event) != trusted_kind:
                    made_by_candidate.add(name)
            why = foreign_library(event, args)
            if why is None:
                why = refused(event, args)
                if why is None or asker(event, args) == trusted_kind:
                    return
            refusals.append(why)
        finally:
            busy.discard(me)
        raise PermissionError(f"the sandbox refuses {why} to candidate code (docs/security.md)")

    def take() -> list[str]:
        out = list(refusals)
        refusals.clear()
        return out

    sys.addaudithook(hook)
    return take
