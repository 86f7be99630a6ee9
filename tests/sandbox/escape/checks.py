"""What "the attempt failed" means for each attack, shared by the evaluation and analysis tests."""

from __future__ import annotations

import os
import re
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from .support import REPO, Listener, kill_pids, processes_named

_ERROR = re.compile(r"^\w+(Error|Exception|Timeout|timeout)\b")


def not_connected(rep: dict, *keys: str) -> None:
    for key in keys:
        value = rep.get(key, "")
        assert not str(value).startswith("connected"), f"{key} was reached from inside the sandbox: {rep}"


def network(rep: dict, listener: Listener) -> None:
    not_connected(rep, "listener", "redis", "unix")
    for key in ("listener", "redis", "unix"):
        assert key in rep, f"the attack did not get to {key}: {rep}"
    assert listener.arrivals() == [], "a connection from the sandbox arrived on the test's loopback listener"


def joined_network(rep: dict, listener: Listener) -> None:
    assert "joined" in rep, f"the attack did not run: {rep}"
    assert rep["joined"] == [], f"setns into another process's network namespace succeeded: {rep}"
    not_connected(rep, "listener", "redis")
    assert listener.arrivals() == [], "a connection from the sandbox arrived on the test's loopback listener"


def _runtime_names_under(folder: str) -> set[str]:
    """Entries of `folder` that the Python runtime lives under (a pyenv in /root, say): a sandbox
    may show those, nothing else of a home folder."""
    names = set()
    for path in (sys.base_prefix, sys.prefix, os.path.realpath(sys.executable)):
        rel = os.path.relpath(os.path.realpath(path), os.path.realpath(folder))
        if not rel.startswith(".."):
            names.add(rel.split(os.sep)[0])
    return names


def read_files_cfg(planted: dict[str, Path]) -> dict:
    return {
        "read": {label: str(path) for label, path in planted.items()},
        "list": {
            "repo": str(REPO),
            "var": str(REPO / "var"),
            "home": str(Path.home()),
            "root": "/root",
            "tmp": tempfile.gettempdir(),
        },
    }


def read_files(rep: dict, texts: list[str], secret: str, cfg: dict) -> None:
    for text in texts:
        assert secret not in text, f"a planted secret was read from inside the sandbox: {rep}"
    for label, path in cfg["read"].items():
        assert _ERROR.match(rep["read"][label]), f"{path} was readable: {rep['read'][label]!r}"
    listing = rep["list"]
    project = {"webapp", "manage.py", "tests", "var", ".git", "README.md", "pyproject.toml"}
    if isinstance(listing["repo"], list):
        assert not project & set(listing["repo"]), f"the project tree is visible: {listing['repo']}"
    assert not isinstance(listing["var"], list) or listing["var"] == [], f"var/ is visible: {listing['var']}"
    for label in ("home", "root"):
        if isinstance(listing[label], list):
            extra = set(listing[label]) - _runtime_names_under(cfg["list"][label])
            assert not extra, f"the {label} folder {cfg['list'][label]} is visible: {sorted(extra)}"
    if isinstance(listing["tmp"], list):
        assert not [n for n in listing["tmp"] if n.startswith("kw-escape-")], (
            f"the host's /tmp is visible: {listing['tmp']}"
        )


def write_files_cfg(token: str) -> dict:
    import torch

    tmp, home = Path(tempfile.gettempdir()), Path.home()
    create = {
        "repo": REPO / f"kw-escape-{token}-w",
        "sandbox_pkg": REPO / "sandbox" / f"kw_escape_{token}.py",
        "var": REPO / "var" / f"kw-escape-{token}-w",
        "home": home / f".kw-escape-{token}-w",
        "tmp": tmp / f"kw-escape-{token}-w",
        "site_packages": Path(sysconfig.get_paths()["purelib"]) / f"kw_escape_{token}.txt",
        "stdlib": Path(sysconfig.get_paths()["stdlib"]) / f"kw_escape_{token}.txt",
    }
    existing = {
        "sandbox_init": REPO / "sandbox" / "__init__.py",
        "torch_init": Path(torch.__file__),
        "stdlib_os": Path(os.__file__),
    }
    return {"create": {k: str(v) for k, v in create.items()}, "open": {k: str(v) for k, v in existing.items()}}


def written_files(rep: dict, cfg: dict) -> None:
    """Nothing new on the host, no file of the runtime or the tree opened for writing."""
    appeared = [p for p in cfg["create"].values() if os.path.lexists(p)]
    for path in appeared:
        os.unlink(path)
    assert not appeared, f"the sandbox wrote onto the host: {appeared} ({rep})"
    opened = [label for label, v in rep["open"].items() if v == "ok"]
    assert not opened, f"the sandbox could open for writing: {[cfg['open'][k] for k in opened]}"


def daemon_cfg(token: str) -> dict:
    return {
        "name": ("kwd" + token)[:15],
        "heartbeat": str(Path(tempfile.gettempdir()) / f"kw-escape-hb-{token}"),
        "lifetime": 60,
    }


def no_survivor(rep: dict, cfg: dict, listener: Listener, ended: float) -> None:
    """Two seconds after the evaluation: no process by the daemon's name, no fresh heartbeat, no call."""
    time.sleep(2)
    alive = processes_named(cfg["name"])
    heartbeat = Path(cfg["heartbeat"])
    try:
        late = heartbeat.exists() and heartbeat.stat().st_mtime > ended + 0.5
        calls = [a for a in listener.arrivals(0.5) if "KWDAEMON" in a]
        assert not alive, f"processes {alive} started by the evaluation still run after it ended ({rep})"
        assert not late, f"a process kept writing {heartbeat} after the evaluation ended"
        assert not calls, (
            f"a process started by the evaluation called the test's listener {len(calls)} times: {calls[:2]}"
        )
    finally:
        kill_pids(alive)
        heartbeat.unlink(missing_ok=True)
