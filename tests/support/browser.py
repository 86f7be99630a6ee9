"""Headless Chromium through Playwright: Debian's /usr/bin/chromium, never a downloaded browser."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.support.processes import ROOT

CHROMIUM = os.environ.get("KERNELWRIGHT_CHROMIUM", "/usr/bin/chromium")
# Without the background-networking flags Chromium keeps trying hosts a closed network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
SCREENSHOT_DIR = ROOT / "artifacts" / "screenshots"


def launch_chromium(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


def screenshot_path(name: str) -> Path:
    """Where a test saves a screenshot: artifacts/screenshots/<name>.png (kept by CI, gitignored)."""
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    return SCREENSHOT_DIR / (re.sub(r"[^A-Za-z0-9_.-]+", "-", name) + ".png")
