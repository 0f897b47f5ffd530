"""What the seed studies share: a seed's run trained by `arena train` (resumed where it stopped),
and the study's rows, one a seed, kept in a JSON file that a later call extends."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def train_run(config: str, seed: int, run: Path, extra: list[str] | None = None) -> Path:
    """`arena train CONFIG --set seed=S --out RUN --resume [EXTRA]`: a finished run returns at
    once, a killed one goes on from its last checkpoint."""
    cmd = ["train", config, "--set", f"seed={seed}", "--out", str(run), "--resume", *(extra or [])]
    subprocess.run([sys.executable, "-m", "cli.main", *cmd], check=True)
    return run


def extend_rows(
    path: Path, seeds: list[int], score: Callable[[int], dict], report: Callable[[dict], None]
) -> list[dict]:
    """The rows in `path` (a JSON list, one row a seed), with `score(seed)` appended for every
    seed of `seeds` it lacks, in order; the file is rewritten after each (a stopped study keeps
    its finished seeds) and `report(row)` prints the new row."""
    rows = json.loads(path.read_text()) if path.is_file() else []
    done = {r["seed"] for r in rows}
    for seed in seeds:
        if seed in done:
            continue
        rows.append(score(seed))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows, indent=1) + "\n")
        report(rows[-1])
    return rows


def study_parser(doc: str, seeds: list[int], runs: str, data: str) -> argparse.ArgumentParser:
    """A study's command line: `--seeds`, `--runs` (the runs' folder), `--json` (the data file)
    and `--png` (its figure, by default the data file's name as .png); `doc`'s first line is
    the description."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=seeds)
    ap.add_argument("--runs", type=Path, default=Path(runs), help="the runs' folder")
    ap.add_argument("--json", type=Path, default=Path(data), help="the data file, one row a seed")
    ap.add_argument("--png", type=Path, default=None, help="figure (default: --json as .png)")
    return ap
