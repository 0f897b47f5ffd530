"""PFSP matchmaking from a decayed win-rate table, worked out by hand."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from tests.tiny_run import merged
from training.league import League
from training.sections import PolicyModel


def league(weighting="hard"):
    lg = League(weighting=weighting)
    lg.add("random", "bot", "random")
    lg.add("ckpt-1", "checkpoint", "runs/x/step_00000001")
    lg.add("ckpt-2", "checkpoint", "runs/x/step_00000002")
    return lg


def test_decayed_win_rate():
    lg = league()
    assert lg.win_rate("ckpt-1") == 0.5  # unplayed
    lg.record("ckpt-1", 1.0)  # wins 1, games 1
    lg.record("ckpt-1", 0.0)  # wins 0.99, games 1.99
    lg.record("ckpt-1", 0.5)  # wins 0.99*0.99 + 0.5 = 1.4801, games 0.99*1.99 + 1 = 2.9701
    assert lg.win_rate("ckpt-1") == pytest.approx(1.4801 / 2.9701)


def test_pfsp_hard_and_variance_weights():
    lg = league("hard")
    for _ in range(3):
        lg.record("random", 1.0)  # x = 1
    lg.record("ckpt-1", 0.0)  # x = 0
    # ckpt-2 unplayed: x = 0.5.  hard: (1-x)^2 = 0, 1, 0.25 -> 0, 0.8, 0.2
    assert lg.probabilities() == pytest.approx({"random": 0.0, "ckpt-1": 0.8, "ckpt-2": 0.2})
    lg.weighting = "variance"  # x(1-x) = 0, 0, 0.25 -> all on ckpt-2
    assert lg.probabilities() == pytest.approx({"random": 0.0, "ckpt-1": 0.0, "ckpt-2": 1.0})
    lg.weighting = "uniform"
    assert lg.probabilities() == pytest.approx({"random": 1 / 3, "ckpt-1": 1 / 3, "ckpt-2": 1 / 3})


def test_all_zero_weights_fall_back_to_uniform_and_sampling_follows_probabilities():
    lg = league("hard")
    for name in ("random", "ckpt-1", "ckpt-2"):
        lg.record(name, 1.0)
    assert lg.probabilities() == pytest.approx({"random": 1 / 3, "ckpt-1": 1 / 3, "ckpt-2": 1 / 3})
    lg = league("hard")
    lg.record("random", 1.0)
    lg.record("ckpt-1", 0.0)  # probabilities 0, 0.8, 0.2
    draws = lg.sample(np.random.default_rng(0), 5000)
    assert "random" not in draws
    assert draws.count("ckpt-1") / 5000 == pytest.approx(0.8, abs=0.03)
    assert lg.sample(np.random.default_rng(1), 10) == lg.sample(np.random.default_rng(1), 10)


def test_a_draw_holds_at_most_max_checkpoints_snapshots_and_bots_keep_their_share():
    lg = League(weighting="uniform")
    lg.add("random", "bot", "random")
    for i in range(10):
        lg.add(f"ckpt-{i}", "checkpoint", f"p{i}")
    rng = np.random.default_rng(0)
    counts: dict[str, int] = {}
    for _ in range(2000):
        draws = lg.sample(rng, 32, max_checkpoints=3)
        assert len({d for d in draws if d.startswith("ckpt")}) <= 3
        for d in draws:
            counts[d] = counts.get(d, 0) + 1
    total = 2000 * 32
    assert counts["random"] / total == pytest.approx(1 / 11, abs=0.01)
    for i in range(10):  # over many steps every snapshot is played about equally
        assert counts[f"ckpt-{i}"] / total == pytest.approx(1 / 11, abs=0.01)
    plain = lg.sample(np.random.default_rng(5), 32)
    assert (
        len({d for d in plain if d.startswith("ckpt")}) > 3
    )  # without the cap a draw spreads wide


def test_old_checkpoints_retire_and_state_round_trips():
    lg = League(max_checkpoints=2)
    lg.add("random", "bot", "random")
    for i in range(4):
        lg.add(f"ckpt-{i}", "checkpoint", f"p{i}")
    assert [o.name for o in lg.opponents] == ["random", "ckpt-2", "ckpt-3"]
    lg.record("ckpt-3", 1.0)
    again = League.from_state_dict(json.loads(json.dumps(lg.state_dict())))
    assert again == lg and again.win_rate("ckpt-3") == 1.0


def test_bad_input():
    with pytest.raises(ValueError, match="weighting"):
        League(weighting="greedy")
    with pytest.raises(ValueError, match="empty"):
        League().probabilities()
    lg = league()
    with pytest.raises(KeyError, match="no opponent 'x'"):
        lg.record("x", 1.0)
    with pytest.raises(ValueError, match="score"):
        lg.record("random", 2.0)


# --- ratings from tournaments ------------------------------------------------------------------


def elo_score(r_opp, r_learner):
    return 1 / (1 + 10 ** ((r_opp - r_learner) / 400))


def test_ratings_replace_the_record_of_the_opponents_they_name():
    lg = league("hard")
    lg.record("ckpt-2", 1.0)  # record: x = 1
    lg.use_ratings(
        {"policy": 1000.0, "ckpt-1": 1200.0, "random": 800.0, "ckpt-9": 1100.0}, "policy"
    )
    # 1 / (1 + 10^(200/400)) = 1 / (1 + 3.16228) = 0.240253; random: 1 / (1 + 10^-0.5) = 0.759747
    assert lg.win_rate("ckpt-1") == pytest.approx(0.240253, abs=1e-6)
    assert lg.win_rate("random") == pytest.approx(0.759747, abs=1e-6)
    assert lg.win_rate("ckpt-2") == 1.0  # not rated: its record
    # hard: (1 - x)^2 = 0.577216, 0.057721, 0 -> shares of 0.634937
    assert lg.probabilities() == pytest.approx(
        {"random": 0.057721 / 0.634937, "ckpt-1": 0.577216 / 0.634937, "ckpt-2": 0.0}, abs=1e-5
    )
    lg.add(
        "ckpt-9", "checkpoint", "p9"
    )  # a snapshot the ratings already name is rated when it joins
    assert lg.win_rate("ckpt-9") == pytest.approx(elo_score(1100, 1000))
    again = League.from_state_dict(json.loads(json.dumps(lg.state_dict())))
    assert again == lg and again.probabilities() == lg.probabilities()
    lg.max_checkpoints = 2
    lg.add("ckpt-10", "checkpoint", "p10")  # retires ckpt-1 and its rating
    assert "ckpt-1" not in lg.ratings and "ckpt-9" in lg.ratings
    with pytest.raises(ValueError, match="no player 'me' to stand for the learner"):
        lg.use_ratings({"policy": 1000.0}, "me")


def test_tournament_names_map_a_runs_checkpoint_players_to_snapshots():
    from training.league import tournament_names

    elo, learner = tournament_names(
        {"tiny@20": 1100.0, "tiny@40": 1200.0, "tiny@best": 1250.0, "random": 900.0}
    )
    assert (
        elo == {"ckpt-20": 1100.0, "ckpt-40": 1200.0, "random": 900.0} and learner == "ckpt-40"
    )  # the newest checkpoint
    assert tournament_names({"policy": 1000.0, "ckpt-3": 900.0}) == (
        {"policy": 1000.0, "ckpt-3": 900.0},
        "policy",
    )
    with pytest.raises(ValueError, match="no rated player stands for the learner"):
        tournament_names({"random": 1000.0, "mcts:10": 1200.0})


def bot_tournament(tmp_path) -> Path:
    """A real tournament store: a run's 'checkpoints' (bots standing in) and a bot, on tic-tac-toe."""
    from agents import make_agent
    from tournaments.config import load_config
    from tournaments.matches import arena_play_matches
    from tournaments.run import run_tournament
    from tournaments.store import jsonl_beside

    players = {"run@10": "random", "run@20": "mcts:30", "random": "random"}
    config = load_config(
        {
            "name": "ckpts",
            "format": "round_robin",
            "players": players,
            "games": ["tic_tac_toe"],
            "games_per_pairing": 12,
            "seed": 1,
        }
    )
    db = tmp_path / "ckpts.db"
    agents = {name: make_agent(spec, name) for name, spec in players.items()}
    run_tournament(config, arena_play_matches(agents, jsonl_beside(db), 16, 100), db)
    return db


def test_a_training_league_reads_a_tournaments_ratings(tmp_path):
    from tournaments.run import stored_ratings
    from training.config import parse_config
    from training.league import tournament_names

    db = bot_tournament(tmp_path)
    stored = stored_ratings(db)
    elo, learner = tournament_names(stored)
    assert learner == "ckpt-20" and elo["ckpt-10"] == stored["run@10"]
    lg = League(weighting="hard")
    for name in ("random", "ckpt-10", "ckpt-20"):
        lg.add(name, "checkpoint" if name.startswith("ckpt") else "bot", name)
    lg.use_ratings(elo, learner)
    assert lg.win_rate("ckpt-10") == pytest.approx(elo_score(stored["run@10"], stored["run@20"]))
    assert lg.win_rate("ckpt-10") > 0.5  # mcts (standing for step 20) beats random (step 10) ...
    assert (
        lg.probabilities()["ckpt-20"] > lg.probabilities()["ckpt-10"]
    )  # ... so hard PFSP draws the stronger one more
    base = {"model": "tiny-llama", "games": ["tic_tac_toe"], "steps": 1}
    cfg = parse_config({**base, "league": {"ratings": str(db), "snapshot_every": 10}})
    assert cfg.league.ratings == str(db)
    with pytest.raises(ValueError, match=r"^league.ratings: no tournament store at .*nope.db$"):
        parse_config({**base, "league": {"ratings": str(tmp_path / "nope.db")}})
    (tmp_path / "junk.db").write_text("not a database")
    with pytest.raises(ValueError, match=r"^league.ratings: .*junk.db"):
        parse_config({**base, "league": {"ratings": str(tmp_path / "junk.db")}})


@pytest.mark.parametrize(
    "tournament, message",
    [
        ({"every": -1}, "league.tournament.every must be >= 0, got -1"),
        ({"format": "swis"}, "got 'swis' (did you mean 'swiss'?)"),
        ({"max_matches": -5}, "league.tournament.max_matches must be >= 0, got -5"),
        ({"games_per_pairing": 0}, "league.tournament.games_per_pairing must be >= 1, got 0"),
        (
            {"every": 2, "format": "round_robin", "max_matches": 10},
            "league.tournament.max_matches: format round_robin plays its whole schedule",
        ),
        ({"every": 2, "sometimes": 1}, "unknown key 'league.tournament.sometimes'"),
    ],
)
def test_league_tournament_config_errors(tournament, message):
    from training.config import parse_config

    base = {
        "model": "tiny-llama",
        "games": ["tic_tac_toe"],
        "steps": 1,
        "league": {"snapshot_every": 1, "tournament": tournament},
    }
    with pytest.raises(ValueError) as e:
        parse_config(base)
    assert message in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match="league.tournament rates the league's snapshots and bots"):
        parse_config({**base, "league": {"tournament": {"every": 2}}})


# --- the training loop's league: snapshots in memory, tournaments every K steps ------------------

TINY_RUN = {
    **merged(
        {
            "seed": 5,
            "steps": 2,
            "threads": 1,
            "league": {
                "max_checkpoints": 3,
                "max_loaded": 2,
                "tournament": {"every": 2, "format": "swiss", "max_matches": 8},
            },
        }
    ),
    "eval": {"every": 0},
}  # the shared tiny run (tests.tiny_run), two steps, a tournament every two


def test_a_run_rates_its_league_in_a_tournament_every_k_steps_and_pfsp_follows(tmp_path):
    from rich.console import Console

    from agents import checkpoint
    from tournaments.run import load_tournament
    from training.config import parse_config
    from training.selfplay import train

    run = tmp_path / "run"
    train(parse_config({**TINY_RUN, "run_dir": str(run)}), console=Console(quiet=True))
    assert sorted(p.name for p in (run / "tournaments").glob("*.db")) == [
        "step_00000002.db"
    ]  # every 2 steps
    t = load_tournament(run / "tournaments" / "step_00000002.db")
    assert (
        set(t.config.players) == {"policy", "random", "ckpt-1", "ckpt-2"}
        and t.config.format == "swiss"
    )
    assert (
        len(t.results) == 8
    )  # 4 players: 2 pairings x 2 games a round, the 2 Swiss rounds fit the budget of 8
    meta = json.loads((checkpoint.latest(run / "checkpoints") / "meta.json").read_text())
    lg = League.from_state_dict(meta["league"])
    elo = {p: r.elo for p, r in t.ratings.items()}
    assert lg.ratings == pytest.approx(elo) and lg.learner_rating == pytest.approx(elo["policy"])
    for o in lg.opponents:  # PFSP weights follow the tournament, not the win-rate record
        assert lg.win_rate(o.name) == pytest.approx(
            1 / (1 + 10 ** ((elo[o.name] - elo["policy"]) / 400))
        )


def snapshot_learner(lora: int = 0, seed: int = 0):
    import torch

    from agents.models import load_model
    from training.config import parse_config
    from training.learner import Learner

    cfg = parse_config(
        {**TINY_RUN, "learner": {"lr": 3e-3, "lora_rank": lora}, "league": {"snapshot_every": 1}}
    )
    torch.manual_seed(seed)
    model, tok = load_model(cfg.model, dtype="float32")
    return cfg, Learner(model, tok, cfg.learner)


def nudge(learner, seed: int) -> None:
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in learner.model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)


CONVERSATIONS = [
    [{"role": "user", "content": "Board: . X . / O . . / . . X. Your move?"}],
    [{"role": "user", "content": "Play."}],
]


def test_snapshots_swapped_into_one_module_play_exactly_as_models_built_from_their_files(tmp_path):
    from safetensors.torch import load_file

    from agents.backend import SamplingParams
    from agents.models import load_model
    from agents.transformers_backend import TransformersBackend
    from training.selfplay import Opponents, save_snapshot

    cfg, learner = snapshot_learner()
    paths = []
    for i in range(2):
        nudge(learner, i)
        paths.append(tmp_path / f"step_{i}.safetensors")
        save_snapshot(learner, paths[-1])
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=11)
    expected = []
    base, tok = load_model(cfg.model)  # the pool's module dtype
    for path in paths:  # what a model loaded from the file plays
        model = copy.deepcopy(base)
        model.load_state_dict(load_file(str(path)), strict=False)
        gens = TransformersBackend((model, tok)).generate(CONVERSATIONS, params)
        expected.append([(g.token_ids, g.logprobs) for g in gens])
    assert expected[0] != expected[1]  # two distinct snapshots
    pool = Opponents(PolicyModel.of(cfg), cfg.games, learner.device)
    agents = [pool.agent(f"ckpt-{i}", str(p), "checkpoint", seed=0) for i, p in enumerate(paths)]
    for i in (0, 1, 0, 1):  # interleaved calls: each swaps its weights in
        gens = agents[i].backend.generate(CONVERSATIONS, params)
        assert [(g.token_ids, g.logprobs) for g in gens] == expected[i]
    pool.forget({str(paths[1])})
    assert list(pool._weights) == [str(paths[1])]


def test_a_lora_runs_snapshots_are_its_adapters_and_play_them(tmp_path):
    import torch
    from safetensors.torch import load_file

    from agents.backend import SamplingParams
    from training.selfplay import Opponents, save_snapshot

    cfg, learner = snapshot_learner(lora=4)
    nudge(learner, 3)
    path = tmp_path / "step_1.safetensors"
    save_snapshot(learner, path)
    saved = load_file(str(path))
    assert saved and all("lora_" in k for k in saved)
    full = sum(p.numel() for p in learner.model.parameters())
    assert sum(v.numel() for v in saved.values()) < 0.05 * full  # adapters, not the model
    pool = Opponents(PolicyModel.of(cfg), cfg.games, learner.device)
    agent = pool.agent("ckpt-1", str(path), "checkpoint", seed=0)
    gens = agent.backend.generate(
        CONVERSATIONS, SamplingParams(max_new_tokens=4, temperature=1.0, seed=1)
    )
    assert len(gens) == 2 and all(g.token_ids for g in gens)
    own = pool._backend.model.state_dict()
    assert all(
        torch.equal(own[k], v.to(own[k].dtype)) for k, v in saved.items()
    )  # the adapters it plays are the snapshot's
    cfg_full, _ = snapshot_learner()
    with pytest.raises(
        ValueError,
        match=r"^league snapshot .*step_1.safetensors does not fit tiny-llama:seed=5 with full weights: missing",
    ):
        Opponents(PolicyModel.of(cfg_full), cfg_full.games, learner.device).agent(
            "ckpt-1", str(path), "checkpoint", seed=0
        ).backend.generate(CONVERSATIONS, SamplingParams(max_new_tokens=2))


@pytest.mark.slow
def test_league_step_bench_quick_times_both_paths():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "league_step", Path(__file__).resolve().parents[2] / "bench" / "league_step.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.main(["--quick", "--model", "tiny-llama"])
    assert (
        set(out["step"]) == {"selfplay", "league"}
        and out["step_ratio"] > 0
        and out["rollout_ratio"] > 0
    )


@pytest.mark.slow
def test_a_run_with_league_tournaments_resumes_exactly(tmp_path):
    import torch
    from rich.console import Console
    from safetensors.torch import load_file

    from training.config import parse_config
    from training.selfplay import train

    def run(name, steps, resume=False):
        cfg = parse_config(
            {
                **TINY_RUN,
                "steps": steps,
                "league": {**TINY_RUN["league"], "max_loaded": 1},
                "run_dir": str(tmp_path / name),
            }
        )
        train(cfg, resume=resume, console=Console(quiet=True))

    run("straight", 4)
    run("split", 2)
    run("split", 4, resume=True)
    a = load_file(
        str(tmp_path / "straight" / "checkpoints" / "step_00000004" / "model.safetensors")
    )
    b = load_file(str(tmp_path / "split" / "checkpoints" / "step_00000004" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ma = (
        (tmp_path / "straight" / "checkpoints" / "step_00000004" / "meta.json")
        .read_text()
        .replace("/straight/", "/split/")
    )
    mb = (tmp_path / "split" / "checkpoints" / "step_00000004" / "meta.json").read_text()
    assert (
        json.loads(ma)["league"] == json.loads(mb)["league"] and json.loads(ma)["league"]["ratings"]
    )  # the same tournament ratings
