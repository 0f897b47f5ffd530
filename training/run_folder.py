"""A run's folder: one run per folder, resumed from its newest intact checkpoint.

`prepare_run_dir` readies it (one process at a time: `hold_run_dir`; a fresh start refuses
checkpoints and sets the files of a run that never checkpointed aside in old-<time>/);
`resume_from` loads the newest intact checkpoint (damaged ones go to
checkpoints/damaged-step_N/) and `truncate_after` cuts the logs back to its step;
`settle_best` turns best-pending/ into best/ once a checkpoint covers it. A resume keeps the lr
schedule's horizon the run started with (`schedule_on_resume`).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import IO

import numpy as np

from agents import checkpoint
from core.records import check_writable, read_json_lines
from training.league import League
from training.learner import Learner
from training.learner_config import LearnerConfig


def append_row(path: Path, row: dict) -> None:
    """Append `row` to the JSON-lines file `path`."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def truncate_after(path: Path, step: int) -> None:
    """Keep the lines of steps up to `step`: a run killed after its last checkpoint wrote more (and maybe a torn line)."""
    if path.exists():
        rows = [r for r in read_json_lines(path) if r["step"] <= step]
        tmp = checkpoint.tmp_path(path)
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        os.replace(tmp, path)


RUN_FILES = (
    "config.yaml",
    "metrics.jsonl",
    "eval.jsonl",
    "eval.png",
    "tb",
    "league",
    "tournaments",
    "best",
    "best-pending",
    "checkpoints",
)  # what a run writes


def free_path(path: Path) -> Path:
    """`path`, or `path-2`, `path-3`... if taken."""
    n, out = 1, path
    while out.exists():
        n += 1
        out = path.with_name(f"{path.name}-{n}")
    return out


def check_run_writable(run_dir: Path) -> None:
    """ValueError "cannot write to DIR" unless the run folder and what a run writes in it can be written."""
    check_writable(run_dir / RUN_FILES[0])  # makes the folder, probes it with a new file
    check_writable(run_dir, *(run_dir / n for n in RUN_FILES if (run_dir / n).exists()))


LOCK_FILE = ".lock"
_held: dict[str, IO[str]] = {}  # run folders this process holds: their open lock files


def hold_run_dir(run_dir: Path) -> None:
    """Hold `run_dir` for this process until `release_run_dir` or the process's end (an advisory
    lock on `run_dir/.lock`, freed by the system when the process ends, killed or not).

    ValueError when another process holds it: two runs writing one folder would interleave their
    logs and checkpoints. Holding a folder this process already holds is a no-op.
    """
    key = str(run_dir.resolve())
    if key in _held:
        return
    f = open(run_dir / LOCK_FILE, "a+", encoding="utf-8")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        pid = f.read().strip() or "?"
        f.close()
        raise ValueError(
            f"{run_dir} is in use by another training process (pid {pid}): wait for it to end, "
            "or choose another run_dir (--out)"
        ) from None
    f.truncate(0)
    f.write(f"{os.getpid()}\n")
    f.flush()
    _held[key] = f


def release_run_dir(run_dir: Path) -> None:
    """Let go of `run_dir` if this process holds it (`hold_run_dir`)."""
    f = _held.pop(str(run_dir.resolve()), None)
    if f is not None:
        f.close()  # closing the file drops its lock


def prepare_run_dir(run_dir: Path, resume: bool, say) -> bool:
    """Ready `run_dir` before anything heavy starts; True when there is a checkpoint to resume from.

    "cannot write to DIR" when it cannot be written; "in use" when another process holds it
    (`hold_run_dir`). Removes the temp files of killed writers. A fresh start refuses a folder with checkpoints; the files of a run that never
    reached its first checkpoint (fresh start or --resume) are set aside in old-<time>/, so
    the logs of two runs never mix.
    """
    check_run_writable(run_dir)
    hold_run_dir(run_dir)
    for folder in (run_dir, run_dir / "checkpoints", run_dir / "league"):
        checkpoint.clean_tmp(folder)
    if checkpoint.checkpoints(run_dir / "checkpoints"):
        if not resume:
            raise ValueError(
                f"{run_dir} already holds checkpoints: pass --resume to continue, or choose another run_dir (--out)"
            )
        return True
    if resume:
        say(f"--resume: no checkpoint in {run_dir / 'checkpoints'}; starting fresh")
    present = [run_dir / n for n in RUN_FILES if (run_dir / n).exists()]
    if any(p.name != "config.yaml" and not (p.is_dir() and not any(p.iterdir())) for p in present):
        aside = free_path(run_dir / f"old-{time.strftime('%Y%m%d-%H%M%S')}")
        aside.mkdir()
        for p in present:
            os.replace(p, aside / p.name)
        say(
            f"{run_dir} held the files of a run that never reached a checkpoint: moved them to {aside}"
        )
    return False


def resume_from(
    ckpt_dir: Path, learner: Learner, rng: np.random.Generator, say
) -> tuple[int, League, dict, float, int, float, float, list]:
    """Load the newest intact checkpoint (`checkpoint.resume_point`): its `checkpoint.run_state`.

    A checkpoint with a damaged file is skipped (and moved to damaged-step_N, saying why);
    ValueError when none is intact.
    """
    folder, skipped = checkpoint.resume_point(ckpt_dir)
    if folder is None:
        raise ValueError(
            f"--resume: no intact checkpoint in {ckpt_dir}: "
            + "; ".join(str(e) for _, e in skipped)
        )
    for bad, e in skipped:
        aside = free_path(bad.with_name(f"damaged-{bad.name}"))
        os.replace(bad, aside)
        say(
            f"skipped checkpoint {bad.name}: {e}; moved it to {aside.name}; resuming from {folder.name}"
        )
    step, league, *rest = checkpoint.run_state(checkpoint.load(folder, learner, rng=rng), folder)
    try:
        league = League.from_state_dict(league)
    except (KeyError, TypeError, ValueError) as e:
        raise checkpoint.DamagedCheckpoint(
            f"checkpoint file {folder / 'meta.json'} is damaged (its league state: {type(e).__name__} {e})"
        ) from None
    return (step, league, *rest)


def settle_best(run_dir: Path, step: int, say) -> None:
    """Make best/ the best policy evaluated up to checkpoint `step`.

    A new best is written to best-pending/ and becomes best/ only when a checkpoint covers its
    step (here, right after the checkpoint is saved). A resume from checkpoint k calls this
    too: a pending best from a step after k belongs to steps the run replays (it was killed
    after that evaluation and before its next checkpoint), so it is dropped; the replay
    finds its own. best/ therefore never holds a policy from a step the run replays.
    """
    pending = run_dir / "best-pending"
    if not pending.is_dir():
        return
    try:
        at = checkpoint.read_meta(pending)["step"]
    except checkpoint.DamagedCheckpoint:
        at = None
    if at is not None and at <= step:
        checkpoint.replace_dir(pending, run_dir / "best")
        return
    shutil.rmtree(pending)
    say(
        f"dropped {pending.name}/ "
        + (
            f"from step {at}, after checkpoint {step}: those steps are replayed"
            if at is not None
            else "(damaged)"
        )
    )


def schedule_on_resume(
    lcfg: LearnerConfig, ckpt_dir: Path, horizon_given: bool, say
) -> LearnerConfig:
    """The `learner` section with the lr schedule's horizon a resumed run keeps: `total_steps` as
    the run started with it (its newest intact checkpoint's config), so `--steps` only moves where
    the run stops and a resumed run follows the schedule of the unbroken one. `horizon_given` (the
    config or `--set` names learner.total_steps): `lcfg`'s horizon replaces the run's, said in a
    warning line."""
    folder, _ = checkpoint.resume_point(ckpt_dir)
    if folder is None or lcfg.lr_schedule != "cosine":
        return lcfg
    stored = (checkpoint.read_meta(folder).get("config") or {}).get("learner") or {}
    was = stored.get("total_steps") if stored.get("lr_schedule") == "cosine" else None
    if not isinstance(was, int) or was == lcfg.total_steps:
        return lcfg
    if horizon_given:
        say(
            f"warning: learner.total_steps {lcfg.total_steps} replaces the lr schedule's horizon "
            f"this run started with ({was}): from here on the run differs from an unbroken one"
        )
        return lcfg
    return replace(lcfg, total_steps=was)


def schedule_line(c: LearnerConfig, updates_per_step: int, steps: int, kept: bool = False) -> str:
    """Where the lr schedule ends, in training steps, e.g. "lr cosine to step 600 (learner.total_steps 2400)".

    Args:
        c: the run's `learner` section.
        updates_per_step: learner updates per training step (`epochs` x `minibatches`).
        steps: the step the run stops at.
        kept: a resume kept the run's horizon (said).
    """
    if c.lr_schedule != "cosine" or not c.total_steps:
        return f"lr {c.lr_schedule} {c.lr:g}"
    end = c.total_steps / updates_per_step
    line = f"lr cosine to step {end:g} (learner.total_steps {c.total_steps})"
    if kept:
        line += " as the run started"
    if steps > end:
        line += f", then at its floor {c.lr * c.min_lr_ratio:.3g}"
    return line
