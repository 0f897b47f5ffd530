"""The training config: every field checked with a one-line error, the YAML loader, `arena train`'s checks and overrides before the model loads, the shipped configs."""

import dataclasses
import json
import typing
from pathlib import Path

import pytest
import yaml

from agents import checkpoint
from cli.main import main as cli_main
from tests.tiny_run import TINY, TINY_NET, merged
from training import selfplay
from training.config import TrainConfig, TrainingGame
from training.selfplay import POLICY, load_config, parse_config

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
    "roles": (
        {"first": "player_0"},
        "roles.first must be a non-empty list of seats (player_0, ...) or game roles, got 'player_0'",
    ),
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
    "advantage.aa_others": (
        "max",
        "advantage.aa_others must be one of sum, mean, got 'max'",
    ),
    "advantage.teams": (
        {"player_0": 1},
        "advantage.teams must be a mapping seat -> team name",
    ),
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
    "league.opponent_seats": (0, "league.opponent_seats must be >= 1, got 0"),
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
    "full_width.target": ("cfr", "full_width.target must be one of mmd, cfr_plus, got 'cfr'"),
    "full_width.cfr_iterations": (0, "full_width.cfr_iterations must be >= 1, got 0"),
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
            {"advantage": {"teams": {"player_7": "a"}}},
            "advantage.teams names player_7, not a seat of any training game",
        ),
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
