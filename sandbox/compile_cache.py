"""torch.compile's caches in a reference child's folder (its TORCHINDUCTOR_CACHE_DIR and
TRITON_CACHE_DIR), carried from one evaluation of a task to the next, so the compile baseline
built inside every evaluation compiles once per task, not once per evaluation. Keyed by the
task's hash: only references of the same task code ever read what one of them wrote.

The task's code writes these folders, and the parent that copies them runs as root: a link
planted there and copied to the host cache would be written through by the next copy (red-team
a10). So both directions copy only folders and regular files (links and special files are
skipped; sandbox.hostfs), bounded in size, into a fresh folder; `keep` then renames that over
the cache's entry, whose every path resolves under the cache's root.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from . import cache, hostfs
from .isolation import Child
from .options import EvalOptions

CACHES = (".inductor", ".triton")
MAX_BYTES = 512 << 20
MAX_ENTRIES = 50_000


def entry_dir(task_hash: str, backend: str, options: EvalOptions) -> Path:
    import torch

    return cache.section(options.cache_dir, "compile-caches") / cache.sha256_text(task_hash, backend, torch.__version__)


def seed(ref: Child, task_hash: str, backend: str, options: EvalOptions) -> None:
    """Before the task's code runs: the cached compile folders into the reference's folder. A copy
    that fails (a link, too large) is dropped: the cache only saves time."""
    if not options.compile_baseline:
        return
    src = entry_dir(task_hash, backend, options)
    for name in CACHES:
        dest = ref.workdir / name
        if os.path.lexists(dest):
            continue
        try:
            hostfs.copy_tree(src / name, dest, hostfs.Budget(MAX_BYTES, MAX_ENTRIES), ref.workdir)
        except OSError:  # FileNotFoundError: nothing cached yet
            shutil.rmtree(dest, ignore_errors=True)
            continue
        ref.give_ownership(dest)


def keep(ref: Child, task_hash: str, backend: str, options: EvalOptions) -> None:
    """After a compile baseline was measured (the reference killed): what its compile left, each
    folder copied whole or not at all, then renamed over the cache's entry."""
    dest = entry_dir(task_hash, backend, options)
    root = cache.cache_root(options.cache_dir)
    dest.mkdir(exist_ok=True)
    for name in CACHES:
        fresh = Path(tempfile.mkdtemp(prefix=".new-", dir=dest))
        try:
            hostfs.copy_tree(ref.workdir / name, fresh / name, hostfs.Budget(MAX_BYTES, MAX_ENTRIES), root)
            _replace(fresh / name, dest / name, fresh)
        except OSError:  # missing, a link, too large, swapped while copied: keep nothing
            pass
        finally:
            shutil.rmtree(fresh, ignore_errors=True)


def _replace(new: Path, final: Path, scratch: Path) -> None:
    """`new` in place of `final` (an old entry moves into `scratch` first, removed with it; where
    a concurrent evaluation put its own entry in between, that one stays)."""
    try:
        os.rename(final, scratch / "old")
    except FileNotFoundError:
        pass
    os.rename(new, final)
