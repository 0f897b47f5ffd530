"""What `arena web` finds under its runs folder, and URL paths that cannot leave it.

A tournament is any `*.db` file under the folder that opens read-only as a tournament store
(`tournaments.store.Store`): `arena tournament` writes runs/<name>/tournament.db, and a
training run's checkpoint tournaments sit in its folder too. A training run is any folder
holding a metrics.jsonl or an eval.jsonl (`training.run_folder.RUN_FILES`). Pages name
both by their path relative to the runs folder; `inside` resolves such a path (links
followed) and refuses one that ends outside the folder.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from tournaments.store import Store

RUN_LOGS = ("metrics.jsonl", "eval.jsonl")  # a folder with one of these is a training run


class OutsideRoot(ValueError):
    """A path from a URL that is not inside the runs folder (or names nothing there)."""


def inside(root: Path, relative: str) -> Path:
    """`relative` resolved under `root` (itself resolved); OutsideRoot unless the result
    lies inside `root`: "..", an absolute path or a link out of the folder is refused."""
    if not relative or "\x00" in relative:
        raise OutsideRoot(f"no such path under the runs folder: {relative!r}")
    target = (root / relative).resolve()
    if not target.is_relative_to(root):
        raise OutsideRoot(f"no such path under the runs folder: {relative!r}")
    return target


def relative(root: Path, path: Path) -> str:
    """`path` as pages name it: relative to `root`, with forward slashes."""
    return path.relative_to(root).as_posix()


def is_tournament(path: Path) -> bool:
    """Does `path` open read-only as a tournament store?"""
    if path.suffix != ".db" or not path.is_file():
        return False
    try:
        Store(path, readonly=True).close()
    except (ValueError, sqlite3.Error, OSError):
        return False
    return True


def _files(root: Path):
    """Every file under `root` as (folder, file names), links to folders not followed."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        yield Path(folder), files


def find_tournaments(root: Path) -> list[Path]:
    """The tournament stores under `root`, in path order."""
    out = []
    for folder, files in _files(root):
        out += [folder / f for f in sorted(files) if f.endswith(".db")]
    return [p for p in out if is_tournament(p)]


def find_runs(root: Path) -> list[Path]:
    """The training run folders under `root` (folders with a metrics.jsonl or eval.jsonl)."""
    return [folder for folder, files in _files(root) if any(f in files for f in RUN_LOGS)]
