"""Content-addressed cache: build artifacts, baselines and measured ceilings.

Entries are published by renaming a finished temporary folder into place, so a reader never
sees half an entry and two workers building the same key never corrupt each other (the loser's
rename fails and it uses the winner's entry). Different keys never evict each other.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


def sha256_text(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")  # a lone surrogate in candidate text hashes, never raises
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def files_hash(files: dict[str, str]) -> str:
    return sha256_text(*[x for name in sorted(files) for x in (name, files[name])])


def cache_root(cache_dir: str) -> Path:
    root = Path(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    return root


def section(cache_dir: str, name: str) -> Path:
    path = cache_root(cache_dir) / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def new_staging_dir(cache_dir: str, prefix: str) -> Path:
    """A private folder on the same filesystem as the cache, so publishing is one rename."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=section(cache_dir, "staging")))


def publish_dir(staging: Path, final: Path) -> bool:
    """Move `staging` to `final` atomically. Returns False (and drops staging) if another
    process published the same key first."""
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(staging, final)
        return True
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return False


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
