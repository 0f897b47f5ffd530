"""Shared fixtures."""

import functools
import os
import subprocess

import pytest


@pytest.fixture
def make_read_only():
    """`make_read_only(folder)`: no file can be created in `folder` from then on, not even by
    root (who ignores permission bits: the folder is made immutable, `chattr +i`). Undone
    at teardown. Skips when the folder cannot be made read-only here."""
    done = []

    def make(folder):
        if os.geteuid() == 0:
            proc = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
            if proc.returncode != 0:
                pytest.skip(f"cannot make a folder read-only for root here: {proc.stderr.strip()}")
        else:
            os.chmod(folder, 0o555)
        done.append(folder)

    yield make
    for folder in done:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            os.chmod(folder, 0o755)


@pytest.fixture
def tiny_run(tmp_path):
    """`tiny_run(name="run", **over)`: the shared tiny training run's config (`tests.tiny_run.tiny`)
    with its run folder in this test's tmp_path."""
    from tests.tiny_run import tiny  # start-up time: training imports torch

    return functools.partial(tiny, tmp_path)
