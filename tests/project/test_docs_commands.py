"""The guides' commands run exactly as written (docs/getting-started.md, docs/guides/*.md).

A fenced ```bash block runs here when the line just before its opening fence is a marker:

    <!-- ci: run -->     run in the default suite (every such block takes well under a
                         minute on 2 CPU cores; a page's marked blocks, a few minutes in all)
    <!-- ci: slow -->    run only with `pytest -m slow` (the page's `ci: run` blocks first)

The markers are HTML comments, so the site does not show them. A page's marked blocks run
in order, as a reader would type them, with bash (`set -eo pipefail`), in a fresh folder
holding a copy of `configs/` (whatever a block writes, `runs/` included, stays there), with
the repository on PYTHONPATH and this interpreter's `arena` first on PATH; each must exit 0.
Unmarked blocks (installs, long training runs, servers, clusters, vLLM) are not run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "docs" / "getting-started.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]
MARKER = re.compile(r"^<!--\s*ci:\s*(\w+)\s*-->\s*$")
KINDS = ("run", "slow")
BLOCK_TIMEOUT = 300  # seconds; a marked block is meant to take well under a minute


def marked_blocks(page: Path) -> list[tuple[str, int, str]]:
    """(kind, line number, script) of every marked bash block of a page, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks = []
    for i, line in enumerate(lines):
        m = MARKER.match(line.strip())
        if not m:
            continue
        kind = m.group(1)
        fence = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if kind not in KINDS or fence != "```bash":
            raise ValueError(
                f"{page.relative_to(ROOT)}:{i + 1}: a marker is `<!-- ci: run -->` or "
                f"`<!-- ci: slow -->` on the line just before a ```bash fence"
            )
        end = next(j for j in range(i + 2, len(lines)) if lines[j].strip() == "```")
        blocks.append((kind, i + 3, "\n".join(lines[i + 2 : end]) + "\n"))
    return blocks


def _cases():
    for page in PAGES:
        blocks = marked_blocks(page)
        name = page.relative_to(ROOT / "docs").as_posix()
        if any(kind == "run" for kind, _, _ in blocks):
            yield pytest.param(page, ("run",), id=name)
        if any(kind == "slow" for kind, _, _ in blocks):
            yield pytest.param(page, KINDS, id=f"{name}:slow", marks=pytest.mark.slow)


def test_markers_are_well_formed():
    """Every marker stands just before a bash fence (raises otherwise), and some are marked."""
    assert sum(len(marked_blocks(page)) for page in PAGES) > 0


@pytest.mark.parametrize(("page", "kinds"), list(_cases()))
def test_guide_commands_run_as_written(page: Path, kinds: tuple[str, ...], tmp_path: Path):
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for kind, line, script in marked_blocks(page):
        if kind not in kinds:
            continue
        proc = subprocess.run(
            ["bash", "-eo", "pipefail", "-c", script],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
        )
        where = f"{page.relative_to(ROOT)}:{line}"
        assert proc.returncode == 0, (
            f"{where}: exit {proc.returncode}\n{script}\n--- stdout (end)\n{proc.stdout[-3000:]}"
            f"\n--- stderr (end)\n{proc.stderr[-3000:]}"
        )
