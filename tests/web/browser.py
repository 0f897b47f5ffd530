"""What the browser tests share: `arena web` started as a real server on a free port, and the
system Chromium driven by Playwright (never `playwright install`; the tests skip without
either). With WEB_SCREENSHOTS=1 `screenshot` writes the guide's pictures to docs/guides/img/."""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "docs" / "guides" / "img"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def arena(*args: str, cwd: Path) -> subprocess.Popen:
    """`arena ARGS` as a child process of this checkout's code."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@contextlib.contextmanager
def web_server(runs: Path, *extra: str, cwd: Path):
    """`arena web RUNS EXTRA...` on a free port: its base URL, once it answers."""
    port = free_port()
    proc = arena("web", str(runs), "--port", str(port), *extra, cwd=cwd)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def chromium():
    """The system Chromium under Playwright; skips the test where either is missing."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).is_file():
        pytest.skip("no system Chromium to drive")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        try:
            yield browser
        finally:
            browser.close()


def screenshot(page, name: str) -> None:
    if os.environ.get("WEB_SCREENSHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / name))
