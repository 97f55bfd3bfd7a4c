"""Debian's Chromium under Playwright, for the browser tests (the demo's and the run page's)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium_path() -> str:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("Chromium not found; install it with `apt-get install -y chromium` (make install does)")


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched headless Chromium (skips the test when none is installed)."""
    path = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()
