"""Atomic training checkpoints that resume exactly.

A checkpoint is a folder `<dir>/step_<N>/` holding

    model.safetensors   the policy's weights (with LoRA: base + adapters, as trained)
    optimizer.pt        the AdamW state
    value_head.pt       the critic's value head, when the learner has one
    rng.pt              python `random`, numpy global, torch (CPU and CUDA) RNG states and,
                        when given, a numpy Generator's state
    meta.json           step, learner step, config, league state, estimator state

A full fine-tune with a KL term also writes `<dir>/reference.safetensors` once (the frozen
reference the KL is taken against), so a resumed run measures KL against the same weights
even when it starts from another model. It is written into a hidden temp folder next to it and renamed into place (`os.replace`),
then `<dir>/latest` (a one-line pointer file) is replaced the same way: a run killed at
any moment leaves either the previous checkpoint or the new one, never half of one.
`load` restores weights, optimizer, RNG streams and the learner's step, so training after
a resume is bit-for-bit the run that never stopped.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_model, save_model

LATEST = "latest"
REFERENCE = "reference.safetensors"


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def save(
    directory: str | os.PathLike,
    learner,
    step: int,
    *,
    config: dict | None = None,
    league: dict | None = None,
    state: dict | None = None,
    rng: np.random.Generator | None = None,
    keep: int = 3,
) -> Path:
    """Write checkpoint `step` under `directory` and point `latest` at it.

    Args:
        learner: a `training.learner.Learner` (its model, optimizer and step are saved).
        step: the training loop's step number (names the folder).
        config, league, state: JSON-serialisable dicts stored verbatim (run config,
            `League.state_dict()`, advantage-estimator state...).
        rng: a numpy Generator of the training loop whose stream must resume too.
        keep: how many most recent checkpoints to keep (0 keeps all).
    Returns:
        The checkpoint folder.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:08d}"
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        save_model(learner.model, str(tmp / "model.safetensors"))
        torch.save(learner.optimizer.state_dict(), tmp / "optimizer.pt")
        if getattr(learner, "value_head", None) is not None:
            torch.save(learner.value_head.state_dict(), tmp / "value_head.pt")
        rngs = {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "generator": rng.bit_generator.state if rng is not None else None,
        }
        torch.save(rngs, tmp / "rng.pt")
        meta = {"step": step, "learner_step": learner.step_count, "entropy_coef": learner.entropy_coef, "config": config, "league": league, "state": state}
        try:
            text = json.dumps(meta, indent=1)
        except TypeError as e:
            raise ValueError(f"checkpoint config/league/state must be JSON-serialisable: {e}") from None
        _fsync_write(tmp / "meta.json", text.encode())
        _replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if getattr(learner, "ref_model", None) is not None and not (root / REFERENCE).exists():
        tmp_ref = root / f".{REFERENCE}.tmp"
        save_model(learner.ref_model, str(tmp_ref))
        os.replace(tmp_ref, root / REFERENCE)
    pointer = root / f".{LATEST}.tmp"
    _fsync_write(pointer, (name + "\n").encode())
    os.replace(pointer, root / LATEST)
    if keep > 0:
        for old in sorted(p for p in root.glob("step_*") if p.is_dir())[:-keep]:
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
    return final


def latest(directory: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint folder under `directory`, or None."""
    root = Path(directory)
    pointer = root / LATEST
    if not pointer.exists():
        return None
    path = root / pointer.read_text().strip()
    return path if (path / "meta.json").exists() else None


def _replace_dir(tmp: Path, final: Path) -> None:
    """Rename a finished temp folder into place; an existing one is moved aside first."""
    for f in tmp.iterdir():  # on disk before the rename makes them visible
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    if final.exists():
        old = final.parent / f".old-{final.name}-{os.getpid()}"
        os.replace(final, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(tmp, final)


def save_policy(folder: str | os.PathLike, learner, step: int, *, config: dict, **info) -> Path:
    """Write the policy alone (weights and meta.json: step, config, `info`) to `folder`, atomically.

    The training loop keeps its best-evaluated policy this way (`<run>/best`); like a
    checkpoint it loads as a model or agent (`agents.models.find_checkpoint`), but it has
    no optimizer or RNG state and does not resume.
    """
    final = Path(folder)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        save_model(learner.model, str(tmp / "model.safetensors"))
        _fsync_write(tmp / "meta.json", json.dumps({"step": step, "config": config, **info}, indent=1).encode())
        _replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def load(path: str | os.PathLike, learner, rng: np.random.Generator | None = None) -> dict:
    """Restore a checkpoint into `learner` (and `rng`); returns its meta dict.

    `path` is a checkpoint folder or a run directory (then its `latest` checkpoint).
    Returns {"step", "learner_step", "config", "league", "state"}.
    """
    path = Path(path)
    if not (path / "meta.json").exists():
        found = latest(path)
        if found is None:
            raise FileNotFoundError(f"no checkpoint at {path} (no meta.json and no '{LATEST}' pointer)")
        path = found
    meta = json.loads((path / "meta.json").read_text())
    try:
        missing, unexpected = load_model(learner.model, str(path / "model.safetensors"), strict=False, device=str(learner.device))
    except RuntimeError as e:  # shape mismatch
        raise ValueError(f"checkpoint {path} does not fit this model: {str(e).splitlines()[0]}") from None
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} does not fit this model: missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}")
    if getattr(learner, "ref_model", None) is not None and (path.parent / REFERENCE).exists():
        load_model(learner.ref_model, str(path.parent / REFERENCE), device=str(learner.device))
    if getattr(learner, "value_head", None) is not None:
        if not (path / "value_head.pt").exists():
            raise ValueError(f"checkpoint {path} has no value head (value_head.pt) and this learner needs one (learner.value_coef > 0)")
        learner.value_head.load_state_dict(torch.load(path / "value_head.pt", map_location=learner.device, weights_only=True))
    learner.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=learner.device, weights_only=True))
    learner.step_count = int(meta["learner_step"])
    learner.entropy_coef = float(meta.get("entropy_coef", learner.cfg.loss.entropy_coef))  # adaptive (loss.entropy_target)
    rngs = torch.load(path / "rng.pt", weights_only=False)  # our own file: python/numpy states are pickled tuples
    random.setstate(rngs["python"])
    np.random.set_state(rngs["numpy"])
    torch.set_rng_state(rngs["torch"])
    if rngs["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rngs["cuda"])
    if rng is not None:
        if rngs["generator"] is None:
            raise ValueError(f"checkpoint {path} holds no numpy Generator state to restore")
        rng.bit_generator.state = rngs["generator"]
    return meta
