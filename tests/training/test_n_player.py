"""Self-play in games of more than two players: `arena train` on four-player public goods with
Advantage Alignment and on three-player Kuhn poker with MARS, league opponents in some seats,
and the step's figures for matches of more seats."""

import json

import yaml

from agents import checkpoint
from cli.main import main as cli_main
from core.records import MatchRecord, TurnRecord
from tests.tiny_run import TINY_NET, merged
from training.league import League
from training.step_metrics import league_scores, rollout_metrics

ROUNDS = 3  # public goods rounds: short matches


def arena_train(tmp_path, **over) -> list[dict]:
    """`arena train` on the tiny run's config with `over`; its metrics.jsonl rows."""
    d = merged(
        {
            "model": TINY_NET,
            "steps": 2,
            "matches_per_step": 4,
            "concurrency": 4,
            "eval": {"every": 0, "keep_best": False},
            "checkpoint_every": 0,
            "run_dir": str(tmp_path / "run"),
            **over,
        }
    )
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(d))
    assert cli_main(["train", str(path), "--threads", "1"]) == 0
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in rows]


def test_arena_train_public_goods_with_advantage_alignment_and_a_league_seat(tmp_path):
    metrics = arena_train(
        tmp_path,
        games=[{"name": "public_goods", "params": {"rounds": ROUNDS}}],
        advantage={"estimator": "advantage_alignment", "format_reward": 0.0},
        league={"self_play": 0.5, "bots": ["random"], "snapshot_every": 1, "opponent_seats": 1},
    )
    # per step: 2 self-play matches (4 policy seats) and 2 league matches (3 policy seats), 3 rounds;
    # every policy turn is learned from, none of the opponent's
    policy_turns = (2 * 4 + 2 * 3) * ROUNDS
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["policy_turns"] == m["samples"] == policy_turns for m in metrics)
    assert not any("win_rate" in m for m in metrics)  # a four-player dilemma has no win rate
    meta = json.loads(
        (checkpoint.latest(tmp_path / "run" / "checkpoints") / "meta.json").read_text()
    )
    league = League.from_state_dict(meta["league"])
    assert league.get("random").games > 0  # the league matches scored for PFSP
    assert meta["state"]["advantage"]["aa_batches"] == 2


def test_arena_train_three_player_kuhn_with_mars(tmp_path):
    metrics = arena_train(
        tmp_path,
        games=[{"name": "openspiel:kuhn_poker", "params": {"players": 3}}],
        league={"self_play": 0.5, "bots": ["random"], "opponent_seats": 2},
    )
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["samples"] == m["policy_turns"] > 0 for m in metrics)
    assert not any("win_rate" in m for m in metrics)


def _record(seats: dict[str, str], returns: dict[str, float]) -> MatchRecord:
    turns = [
        TurnRecord(index=i, player=p, agent=a, move="0", action=0)
        for i, (p, a) in enumerate(seats.items())
    ]
    return MatchRecord(
        match_id="m", game="g", params={}, seed=0, seats=seats, turns=turns, returns=returns
    )


def test_league_scores_compare_mean_returns_in_matches_of_more_seats():
    seats = {"player_0": "policy", "player_1": "bot", "player_2": "policy", "player_3": "policy"}
    # the policy's seats average (10 + 12 + 14) / 3 = 12 against the bot's 13: one loss
    rec = _record(seats, {"player_0": 10.0, "player_1": 13.0, "player_2": 12.0, "player_3": 14.0})
    assert league_scores(rec, "policy") == [0.0]
    rec.returns["player_1"] = 12.0
    assert league_scores(rec, "policy") == [0.5]
    rec.returns["player_1"] = 1.0
    assert league_scores(rec, "policy") == [1.0]
    assert "win_rate" not in rollout_metrics([rec], ["bot"])
    # two seats: one score per seat of the policy, from its outcome
    two = _record({"player_0": "policy", "player_1": "bot"}, {"player_0": 1.0, "player_1": -1.0})
    two.outcome = {"player_0": "win", "player_1": "loss"}
    assert league_scores(two, "policy") == [1.0]
    assert rollout_metrics([two], ["bot"])["win_rate"] == 1.0
