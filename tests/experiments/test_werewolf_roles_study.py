"""The werewolf per-role study (experiments/werewolf_roles/study.py): who sits where in each arm,
the deals shared by the arms, and its measures on scripted players and hand-made rows."""

import pytest

import games
from agents import make_agent
from experiments.werewolf_roles import study


def _roles(seed: int) -> list[str]:
    env = games.make(study.GAME, **study.PARAMS)
    env.reset(seed=seed)
    return list(env.unwrapped.role_of)


@pytest.mark.parametrize("seed", [3, 17, 123456])
def test_each_arm_seats_its_adapter_on_its_own_side_of_the_deal(seed):
    roles = _roles(seed)
    assert study.seating("wolves", seed) == ["wolves" if r == "werewolf" else "base" for r in roles]
    assert study.seating("village", seed) == [
        "base" if r == "werewolf" else "village" for r in roles
    ]
    assert study.seating("base", seed) == ["base"] * 5


def test_the_three_arms_play_every_deal_with_its_seed():
    plans = study.deal_plans(4, eval_seed=31)
    assert [p.match_id for p in plans[:3]] == ["village|0000", "wolves|0000", "base|0000"]
    for d in range(4):
        seeds = {p.seed for p in plans[3 * d : 3 * d + 3]}
        assert len(seeds) == 1
    assert len({p.seed for p in plans}) == 4


def test_a_match_row_agrees_with_the_returns_and_the_scripted_seer_tells_every_finding():
    """Scripted players in every seat: a side won exactly when its seats' returns are +1; the
    scripted seer (who lives to speak on these deals) names every werewolf it finds."""
    bot = make_agent("werewolf_heuristic")
    by_arm = study.play_arms({a: bot for a in study.ARMS}, deals=6, eval_seed=5)
    assert [len(rows) for rows in by_arm.values()] == [6, 6, 6]
    plans = study.deal_plans(6, eval_seed=5)
    from arena.runner import play

    records = sorted(play(plans, {a: bot for a in study.ARMS}), key=lambda r: r.match_id)
    found = 0
    for rec in records:
        row = study.match_row(rec)
        roles = _roles(rec.seed)
        village = [rec.returns[f"player_{i}"] for i, r in enumerate(roles) if r != "werewolf"]
        assert row["village_won"] == all(x == 1.0 for x in village)
        assert not (row["village_won"] and row["wolves_won"])
        assert row["told"] == row["found"]
        found += row["found"]
    assert found > 0


def test_the_summary_and_the_paired_gain_are_worked_out_by_hand():
    def row(v: bool, w: bool, votes: int, on: int, found: int, told: int) -> dict:
        return {
            "village_won": v,
            "wolves_won": w,
            "village_votes": votes,
            "village_on_wolves": on,
            "found": found,
            "told": told,
        }

    trained = [
        row(1, 0, 4, 2, 1, 1),
        row(1, 0, 3, 3, 0, 0),
        row(0, 1, 5, 0, 1, 0),
        row(1, 0, 0, 0, 0, 0),
    ]
    base = [
        row(0, 1, 4, 1, 1, 0),
        row(1, 0, 3, 1, 0, 0),
        row(0, 0, 5, 0, 0, 0),
        row(0, 1, 4, 2, 0, 0),
    ]
    s = study.arm_summary(trained)
    assert s["village_win"] == 0.75 and s["wolves_win"] == 0.25
    assert s["village_on_wolves"] == pytest.approx(5 / 12)
    assert s["findings"] == 2 and s["told"] == 0.5
    assert study.arm_summary(base)["told"] == 0.0
    # village wins, trained - base, deal by deal: 1, 0, 0, 1: mean 0.5; the bootstrap's mean is
    # Binomial(4, 1/2) / 4, whose 2.5% and 97.5% quantiles are 0 (P = 1/16) and 1 (P(<= 3) = 15/16)
    assert study.paired_wins(trained, base, "village") == {
        "mean": 0.5,
        "ci": [0.0, 1.0],
        "deals": 4,
    }
    # wolves wins: 0 - 1, 0, 1 - 0, 0 - 1: mean -0.25
    assert study.paired_wins(trained, base, "wolves")["mean"] == -0.25


def test_the_figure_is_drawn(tmp_path):
    rows = [
        {
            "seed": s,
            "steps": 3,
            "training_reward": [-0.3, 0.1, 0.0],
            "village_gain": {"mean": 0.1, "ci": [-0.2, 0.4]},
            "wolves_gain": {"mean": -0.1, "ci": [-0.3, 0.2]},
        }
        for s in (21, 22)
    ]
    study.figure(rows, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000


def test_each_set_override_reaches_arena_train(tmp_path, monkeypatch):
    calls = []

    class Trained(Exception):
        pass

    def train_run(config, seed, run, extra=None):
        calls.append((config, seed, run, extra))
        raise Trained

    monkeypatch.setattr(study, "train_run", train_run)
    argv = ["--seeds", "5", "--runs", str(tmp_path), "--json", str(tmp_path / "rows.json")]
    with pytest.raises(Trained):
        study.main([*argv, "--set", "learner.lr=5e-4", "--set", "max_minutes=60"])
    assert calls == [
        (
            study.CONFIG,
            5,
            tmp_path / "5",
            ["--set", "learner.lr=5e-4", "--set", "max_minutes=60"],
        )
    ]
