"""The precision a training checkpoint plays in: the one it was trained in, unless told otherwise.

A policy's moves depend on the precision its forward passes run in: a run's own evaluations
score it in the learner's precision, so `llm:CHECKPOINT` plays in that one too
(docs/results/kuhn.md shows what playing in another costs). Where it comes from:

1. `dtype=float32` or `dtype=bfloat16` in the agent spec: always wins;
2. the checkpoint's meta.json `precision`: the learner's resolved precision, recorded at save;
3. the run config's `learner.precision`, when it names float32 or bfloat16 (checkpoints
   saved before meta.json recorded the resolved precision);
4. none of these (a run under `precision: auto` saved before the precision was recorded):
   today's `dtype: auto` rule, bf16 on a GPU and on a CPU the faster of bf16 and fp32
   (`core.machine.compute_dtype`), with a note saying the training precision is unknown.

`dtype=auto` (or no dtype) asks for this choice. Each choice is said in one line on stderr.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from core.machine import compute_dtype, resolve_device

TRAINED = ("float32", "bfloat16")  # the precisions a learner trains in


def trained_precision(meta: dict) -> tuple[str | None, str]:
    """The precision a checkpoint's policy was trained in, and where that was read.

    Args:
        meta: the checkpoint's meta.json (`agents.checkpoint.read_meta`).

    Returns:
        ("float32" or "bfloat16", "its meta.json" or "its config's learner.precision"), or
        (None, why it is unknown).
    """
    if meta.get("precision") in TRAINED:
        return meta["precision"], "its meta.json"
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    learner = config.get("learner") if isinstance(config.get("learner"), dict) else {}
    named = learner.get("precision", "auto")
    if named in TRAINED:
        return named, "its config's learner.precision"
    return None, f"its config's learner.precision is {named} and meta.json records no precision"


@dataclass(frozen=True)
class PlayPrecision:
    """The dtype a checkpoint is loaded in, and the line that says why."""

    dtype: str  # "float32" or "bfloat16"
    line: str


def play_precision(
    folder: Path, meta: dict, asked: str | None = None, device: str = "auto"
) -> PlayPrecision:
    """The precision checkpoint `folder` plays in (module docstring) and the line saying so.

    Args:
        folder: the checkpoint folder (named in the line).
        meta: its meta.json.
        asked: the spec's `dtype`, if any ("auto" and None ask for the checkpoint's own).
        device: the backend's device ("auto": CUDA when there is one).

    Returns:
        The dtype and the console line.

    Raises:
        ValueError: `asked` is not float32, bfloat16 or auto.
    """
    trained, source = trained_precision(meta)
    if asked not in (None, "auto"):
        dtype = compute_dtype(str(asked))  # checks the name
        known = f"trained in {trained}" if trained else "its training precision is unknown"
        return PlayPrecision(dtype, f"checkpoint {folder} plays in {dtype} as asked ({known})")
    if trained is not None:
        other = "bfloat16" if trained == "float32" else "float32"
        return PlayPrecision(
            trained,
            f"checkpoint {folder} plays in {trained}, the precision it was trained in "
            f"({source}; dtype={other} overrides)",
        )
    dtype = compute_dtype("auto", resolve_device(device))
    return PlayPrecision(
        dtype,
        f"checkpoint {folder} plays in {dtype}, dtype auto's choice on this machine: "
        f"its training precision is unknown ({source}); dtype=float32 or dtype=bfloat16 overrides",
    )


def checkpoint_precision(
    folder: Path, asked: str | None = None, device: str = "auto"
) -> PlayPrecision:
    """`play_precision` of checkpoint `folder` from its meta.json, its line said on stderr: what
    an `llm:CHECKPOINT` agent and `arena serve CHECKPOINT` load it in."""
    from agents.checkpoint import read_meta  # start-up time: torch

    precision = play_precision(folder, read_meta(folder), asked, device)
    say(precision.line)
    return precision


_said: set[str] = set()  # lines already printed: agents on one checkpoint share a backend


def say(line: str) -> None:
    """Print `line` to stderr, once per process."""
    if line not in _said:
        _said.add(line)
        print(line, file=sys.stderr)
