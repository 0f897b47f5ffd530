"""PFSP matchmaking from a decayed win-rate table, worked out by hand."""

import json

import numpy as np
import pytest

from training.league import League


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
    assert len({d for d in plain if d.startswith("ckpt")}) > 3  # without the cap a draw spreads wide


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
