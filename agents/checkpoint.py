"""Atomic training checkpoints that resume exactly.

A checkpoint is a folder `<dir>/step_<N>/` holding

    model.safetensors   the policy's weights (with LoRA: base + adapters, as trained)
    optimizer.pt        the AdamW state
    value_head.pt       the critic's value head, when the learner has one
    magnet.safetensors  the magnet of Magnetic Mirror Descent (loss.magnet_coef > 0), as it
                        was at that step
    rng.pt              python `random`, numpy global, torch (CPU and CUDA) RNG states and,
                        when given, a numpy Generator's state
    meta.json           step, learner step, the learner's resolved precision (float32 or
                        bfloat16: what `llm:` plays the policy in), config, league state,
                        estimator state

A full fine-tune with a KL term also writes `<dir>/reference.safetensors` once (the frozen
reference the KL is taken against), so a resumed run measures KL against the same weights
even when it starts from another model. It is written into a hidden temp folder next to it and renamed into place (`os.replace`),
then `<dir>/latest` (a one-line pointer file) is replaced the same way: a run killed at
any moment leaves either the previous checkpoint or the new one, never half of one.
`load` restores weights, optimizer, RNG streams and the learner's step, so training after
a resume is bit-for-bit the run that never stopped. It reads and checks every file before
changing anything; a file that cannot be read (truncated, junk, missing) raises
`DamagedCheckpoint` naming it, and `checkpoints()` lists the others to fall back on:
`resume_point` is the newest intact one, what a resume, `finished` and the seed sweep's scoring take.
Every temp name is `.tmp-<name>-<pid>` (or `.old-<name>-<pid>`): `clean_tmp` removes
those a killed writer left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model

LATEST = "latest"
REFERENCE = "reference.safetensors"
MAGNET = "magnet.safetensors"
TMP = re.compile(r"\.(?:tmp|old)-.+-(\d+)")  # a writer's temp file or folder; the number is its pid


class DamagedCheckpoint(ValueError):
    """A checkpoint file that cannot be read: truncated, junk or missing."""


def tmp_path(final: Path) -> Path:
    """Where this process writes `final` before renaming it into place."""
    return final.parent / f".tmp-{final.name}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def clean_tmp(directory: str | os.PathLike) -> list[Path]:
    """Remove the temp files and folders of killed writers (ours, or of pids no longer alive) in `directory`."""
    root = Path(directory)
    removed = []
    for p in sorted(root.glob(".*")) if root.is_dir() else []:
        m = TMP.fullmatch(p.name)
        if m is None or (int(m[1]) != os.getpid() and _alive(int(m[1]))):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(p)
    return removed


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
        config: the run config, a JSON-serialisable dict stored verbatim.
        league: `League.state_dict()`, stored verbatim.
        state: other JSON-serialisable state stored verbatim (the advantage estimator's...).
        rng: a numpy Generator of the training loop whose stream must resume too.
        keep: how many most recent checkpoints to keep (0 keeps all).
    Returns:
        The checkpoint folder.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:08d}"
    final = root / name
    tmp = tmp_path(final)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        _save_weights(learner.model, tmp / "model.safetensors")
        torch.save(learner.optimizer.state_dict(), tmp / "optimizer.pt")
        if getattr(learner, "value_head", None) is not None:
            torch.save(learner.value_head.state_dict(), tmp / "value_head.pt")
        if getattr(learner, "magnet", None) is not None:
            _save_weights(learner.magnet, tmp / MAGNET)
        rngs = {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "generator": rng.bit_generator.state if rng is not None else None,
        }
        torch.save(rngs, tmp / "rng.pt")
        meta = {
            "step": step,
            "learner_step": learner.step_count,
            "entropy_coef": learner.entropy_coef,
            **_precision(learner),
            "config": config,
            "league": league,
            "state": state,
        }
        try:
            text = json.dumps(meta, indent=1)
        except TypeError as e:
            raise ValueError(
                f"checkpoint config/league/state must be JSON-serialisable: {e}"
            ) from None
        _fsync_write(tmp / "meta.json", text.encode())
        replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if getattr(learner, "ref_model", None) is not None and not (root / REFERENCE).exists():
        tmp_ref = tmp_path(root / REFERENCE)
        _save_weights(learner.ref_model, tmp_ref)
        os.replace(tmp_ref, root / REFERENCE)
    pointer = tmp_path(root / LATEST)
    _fsync_write(pointer, (name + "\n").encode())
    os.replace(pointer, root / LATEST)
    if keep > 0:
        for old in sorted(p for p in root.glob("step_*") if p.is_dir())[:-keep]:
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
    return final


def checkpoints(directory: str | os.PathLike) -> list[Path]:
    """The complete checkpoint folders under `directory` (`step_N` with a meta.json), newest first."""
    root = Path(directory)
    found = [p for p in root.glob("step_*") if p.name[5:].isdigit() and (p / "meta.json").is_file()]
    return sorted(found, key=lambda p: int(p.name[5:]), reverse=True)


def latest(directory: str | os.PathLike) -> Path | None:
    """The checkpoint `latest` points at (else the newest complete one) under `directory`, or None."""
    root = Path(directory)
    try:
        name = (root / LATEST).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):  # no pointer yet, or a damaged one
        name = ""
    if name and "/" not in name and (root / name / "meta.json").is_file():
        return root / name
    found = checkpoints(root)
    return found[0] if found else None


def run_state(meta: dict, folder: Path) -> tuple:
    """A checkpoint's run state: (step, league state dict, advantage state, elapsed, games, best,
    budget_elapsed, restart positions); DamagedCheckpoint when its meta.json does not hold one.
    The league comes back as its state dict (`training.league.League.from_state_dict` reads it)."""
    try:
        s = meta["state"]
        if not isinstance(meta["league"], dict) or not isinstance(
            meta["league"].get("opponents", []), list
        ):
            raise TypeError("league state is not a mapping with an opponents list")
        return (
            meta["step"],
            dict(meta["league"]),
            dict(s["advantage"]),
            float(s["elapsed"]),
            int(s["games"]),
            float(s.get("best", -1.0)),
            budget_elapsed(meta),
            list(s.get("restarts", [])),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DamagedCheckpoint(
            f"checkpoint file {folder / 'meta.json'} is damaged (its run state: {type(e).__name__} {e})"
        ) from None


def resume_point(ckpt_dir: Path) -> tuple[Path | None, list[tuple[Path, DamagedCheckpoint]]]:
    """The checkpoint a resume takes, and the newer ones it skips with why: the newest complete one
    whose files all read (`read_files`) and whose run state parses. Not the `latest`
    pointer: a pointer can name a folder that was damaged or removed since."""
    skipped = []
    for folder in checkpoints(ckpt_dir):
        try:
            run_state(read_files(folder, mmap=True)["meta"], folder)
            return folder, skipped
        except DamagedCheckpoint as e:
            skipped.append((folder, e))
    return None, skipped


def over_budget(elapsed_seconds: float, max_minutes: float) -> bool:
    """The training loop's time rule: a run with `max_minutes` > 0 stops once its wall time, over all of
    its sessions, reaches it (checked after each step's training, before that step's evaluation)."""
    return max_minutes > 0 and elapsed_seconds / 60 >= max_minutes


def budget_elapsed(meta: dict) -> float:
    """The wall time (s) the time rule was checked against at a checkpoint's step (`over_budget`);
    checkpoints written before it was stored: their elapsed time, evaluation included."""
    state = meta.get("state") if isinstance(meta.get("state"), dict) else {}
    return float(state.get("budget_elapsed", state.get("elapsed", 0.0)))


def finished(run_dir: str | os.PathLike, steps: int, max_minutes: float) -> bool:
    """Whether resuming the run in `run_dir` would train no further step: the checkpoint a resume
    takes (`resume_point`) is at `steps` (or beyond), or its time budget was spent. No intact checkpoint: False."""
    found, _ = resume_point(Path(run_dir) / "checkpoints")
    if found is None:
        return False
    meta = read_meta(found)
    return meta["step"] >= steps or over_budget(budget_elapsed(meta), max_minutes)


def replace_dir(tmp: Path, final: Path) -> None:
    """Rename a finished temp folder into place (its files synced first); an existing one is moved aside first."""
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


@contextlib.contextmanager
def writing(path: str | os.PathLike):
    """Raise safetensors' write failures (a full disk, a file-size limit) as the OSError they
    are, naming `path`, instead of SafetensorError."""
    try:
        yield
    except SafetensorError as e:
        raise OSError(f"could not write {path}: {e}") from e


def _precision(learner) -> dict:
    """{"precision": the learner's resolved precision} for meta.json (what `llm:` plays the
    policy in, `agents.play_precision`); {} for a learner that names none."""
    dtype = getattr(learner, "compute_dtype", None)
    return {"precision": dtype} if isinstance(dtype, str) else {}


def _save_weights(model: torch.nn.Module, path: Path) -> None:
    with writing(path):
        save_model(model, str(path))


def save_policy(folder: str | os.PathLike, learner, step: int, *, config: dict, **info) -> Path:
    """Write the policy alone (weights and meta.json: step, precision, config, `info`) to `folder`, atomically.

    The training loop keeps its best-evaluated policy this way (`<run>/best`); like a
    checkpoint it loads as a model or agent (`agents.models.find_checkpoint`), but it has
    no optimizer or RNG state and does not resume.
    """
    final = Path(folder)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(final)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        _save_weights(learner.model, tmp / "model.safetensors")
        _fsync_write(
            tmp / "meta.json",
            json.dumps(
                {"step": step, **_precision(learner), "config": config, **info}, indent=1
            ).encode(),
        )
        replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _read(path: Path, reader):
    """`reader(path)`; any failure means the file is damaged: DamagedCheckpoint naming it."""
    if not path.is_file():
        raise DamagedCheckpoint(f"checkpoint {path.parent}: {path.name} is missing")
    try:
        return reader(path)
    except Exception as e:  # truncated or junk: whatever the parser raised
        reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DamagedCheckpoint(
            f"checkpoint file {path} is damaged ({type(e).__name__}{': ' + reason if reason else ''})"
        ) from None


def latest_precision(directory: str | os.PathLike) -> str | None:
    """The precision the latest checkpoint under `directory` was trained in (its meta.json), or
    None where there is no checkpoint or it predates the field."""
    folder = latest(directory)
    return read_meta(folder).get("precision") if folder else None


def read_meta(folder: str | os.PathLike) -> dict:
    """A checkpoint's (or saved policy's) meta.json: a mapping with the step, else DamagedCheckpoint."""
    path = Path(folder) / "meta.json"
    meta = _read(path, lambda p: json.loads(p.read_text(encoding="utf-8")))
    if not isinstance(meta, dict) or type(meta.get("step")) is not int:
        raise DamagedCheckpoint(
            f"checkpoint file {path} is damaged (not a checkpoint's meta: no step)"
        )
    return meta


def _safetensors(path: Path) -> None:
    with safe_open(
        str(path), "pt"
    ) as f:  # reads the header and checks the file covers every tensor
        f.keys()


def check_weights(path: str | os.PathLike) -> None:
    """DamagedCheckpoint naming a safetensors file that is missing, truncated or not one (cheap: the header only)."""
    _read(Path(path), _safetensors)


def _rng_states(path: Path) -> dict:
    rngs = torch.load(
        path, weights_only=False
    )  # our own file: python/numpy states are pickled tuples
    random.Random().setstate(rngs["python"])  # checked on throwaway generators first
    np.random.RandomState().set_state(rngs["numpy"])
    torch.Generator().set_state(rngs["torch"])
    if not {"cuda", "generator"} <= rngs.keys():
        raise KeyError("no cuda or generator state")
    return rngs


def read_files(path: str | os.PathLike, device="cpu", mmap: bool = False) -> dict:
    """Read and check every file of checkpoint folder `path` that `load` restores, restoring nothing:
    {"meta", "optimizer", "rng", "value_head" (None without value_head.pt)}; DamagedCheckpoint naming the first bad file.
    `mmap`: map the tensors on the CPU instead of reading them (a check of a big optimizer state without its RAM)."""
    path = Path(path)
    meta = read_meta(path)
    if type(meta.get("learner_step")) is not int:
        raise DamagedCheckpoint(
            f"checkpoint file {path / 'meta.json'} is damaged (no learner_step)"
        )
    check_weights(path / "model.safetensors")

    def tensors(p: Path):
        return torch.load(p, map_location="cpu" if mmap else device, weights_only=True, mmap=mmap)

    value_head = (
        _read(path / "value_head.pt", tensors) if (path / "value_head.pt").exists() else None
    )
    optimizer = _read(path / "optimizer.pt", tensors)
    return {
        "meta": meta,
        "optimizer": optimizer,
        "rng": _read(path / "rng.pt", _rng_states),
        "value_head": value_head,
    }


def load(path: str | os.PathLike, learner, rng: np.random.Generator | None = None) -> dict:
    """Restore a checkpoint into `learner` (and `rng`); returns its meta dict.

    `path` is a checkpoint folder or a run directory (then its `latest` checkpoint).
    Returns {"step", "learner_step", "config", "league", "state"} (and "precision", the
    learner's resolved precision, in checkpoints that record it). Every file is read and
    checked (`read_files`) before anything is restored: a damaged one raises `DamagedCheckpoint` (a
    ValueError) naming it and leaves `learner` as it was; a checkpoint of another model
    raises ValueError.
    """
    path = _folder(Path(path))
    # the masters and the optimizer state live on the learner's master device (the CPU when offloaded)
    masters = getattr(learner, "master_device", learner.device)
    files = read_files(path, masters)
    meta = files["meta"]
    value_head, reference, magnet = _parts_needed(path, learner, files)
    _load_weights(path, learner, masters, reference, magnet)
    _load_learner_state(path, learner, value_head, files["optimizer"])
    learner.step_count = meta["learner_step"]
    if hasattr(learner, "sync_policy"):
        learner.sync_policy()  # a bf16 learner computes with a copy of the loaded masters (rounded as at that step)
    learner.entropy_coef = float(
        meta.get("entropy_coef", learner.cfg.loss.entropy_coef)
    )  # adaptive (loss.entropy_target)
    _restore_rngs(path, files["rng"], rng)
    return meta


def _folder(path: Path) -> Path:
    """The checkpoint folder `path` names: itself, or a run directory's `latest` one."""
    if (path / "meta.json").exists():
        return path
    found = latest(path)
    if found is None:
        raise FileNotFoundError(f"no checkpoint at {path} (no meta.json and no '{LATEST}' pointer)")
    return found


def _parts_needed(path: Path, learner, files: dict) -> tuple:
    """(value head state, reference weights file, magnet module) the learner restores beside its
    model, each None when it has none; ValueError when the checkpoint lacks one it needs, and the
    weights files' headers checked."""
    needs_head = getattr(learner, "value_head", None) is not None
    value_head = files["value_head"] if needs_head else None
    if needs_head and value_head is None:
        raise ValueError(
            f"checkpoint {path} has no value head (value_head.pt) and this learner needs one (learner.value_coef > 0)"
        )
    reference = (
        path.parent / REFERENCE
        if getattr(learner, "ref_model", None) is not None and (path.parent / REFERENCE).exists()
        else None
    )
    if reference is not None:
        check_weights(reference)
    magnet = getattr(learner, "magnet", None)
    if magnet is not None:
        if not (path / MAGNET).exists():
            raise ValueError(
                f"checkpoint {path} has no magnet ({MAGNET}) and this learner needs one (learner.loss.magnet_coef > 0)"
            )
        check_weights(path / MAGNET)
    return value_head, reference, magnet


def _load_weights(path: Path, learner, masters, reference: Path | None, magnet) -> None:
    """Load the model's weights (ValueError when they do not fit it), the KL reference and the magnet."""
    try:
        missing, unexpected = load_model(
            learner.model, str(path / "model.safetensors"), strict=False, device=str(masters)
        )
    except RuntimeError as e:  # shape mismatch
        raise ValueError(
            f"checkpoint {path} does not fit this model: {str(e).splitlines()[0]}"
        ) from None
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {path} does not fit this model: missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}"
        )
    if reference is not None:
        load_model(learner.ref_model, str(reference), device=str(learner.device))
    if magnet is not None:
        load_model(magnet, str(path / MAGNET), device=str(learner.device))


def _load_learner_state(path: Path, learner, value_head: dict | None, optimizer: dict) -> None:
    """Load the value head's and the optimizer's state; ValueError when they do not fit the learner."""
    try:
        if value_head is not None:
            learner.value_head.load_state_dict(value_head)
        learner.optimizer.load_state_dict(optimizer)
    except (RuntimeError, ValueError, KeyError) as e:
        raise ValueError(
            f"checkpoint {path} does not fit this learner: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"
        ) from None


def _restore_rngs(path: Path, rngs: dict, rng: np.random.Generator | None) -> None:
    """Set python's, numpy's and torch's global RNG states (CUDA's where there is one) and `rng`'s."""
    random.setstate(rngs["python"])
    np.random.set_state(rngs["numpy"])
    torch.set_rng_state(rngs["torch"])
    if rngs["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rngs["cuda"])
    if rng is not None:
        if rngs["generator"] is None:
            raise ValueError(f"checkpoint {path} holds no numpy Generator state to restore")
        rng.bit_generator.state = rngs["generator"]
