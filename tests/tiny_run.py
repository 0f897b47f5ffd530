"""The tiny training run the training tests share: a tiny-llama policy on tic-tac-toe, three
steps of eight matches, a league of the random bot and snapshots, an evaluation every two
steps. `tiny(tmp_path, **over)` is its parsed config (the `tiny_run` fixture of
tests/conftest.py binds tmp_path), `merged(over)` its dict with `over` applied."""

from __future__ import annotations

import json

from training.config import TrainConfig, parse_config

TINY = {
    "model": "tiny-llama",
    "seed": 3,
    "steps": 3,
    "games": ["tic_tac_toe"],
    "matches_per_step": 8,
    "concurrency": 8,
    "agent": {
        "prompt": "compact",
        "constrained": True,
        "temperature": 1.0,
        "max_new_tokens": 4,
        "max_retries": 0,
    },
    "advantage": {"estimator": "mars", "format_reward": 0.0},
    "learner": {"lr": 3e-3},
    "league": {
        "self_play": 0.5,
        "bots": ["random"],
        "snapshot_every": 1,
        "max_checkpoints": 2,
        "max_loaded": 1,
    },
    "eval": {"every": 2, "games": 8, "opponents": ["random"]},
    "checkpoint_every": 2,
}


TINY_NET = (
    "tiny-llama:hidden=32:heads=2:layers=1"  # the smallest net: for tests of how the model is built
)


def merged(over: dict) -> dict:
    """A copy of TINY with `over` applied (sections updated key by key)."""
    d = json.loads(json.dumps(TINY))
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(d.get(k), dict):
            d[k].update(v)
        else:
            d[k] = v
    return d


def tiny(tmp_path, name="run", **over) -> TrainConfig:
    """The tiny run's config with `over` applied, its run folder `tmp_path/name`."""
    d = merged(over)
    d["run_dir"] = str(tmp_path / name)
    return parse_config(d)


def quiet():
    """A console that prints nothing: the training loop's lines, unwanted in a test."""
    from rich.console import Console

    return Console(quiet=True)
