"""The commons study's measures (experiments/commons/study.py) on scripted fishers whose
results are worked out by hand: 4 seats, 12 rounds, stock 100, no discussion."""

import pytest

from agents import make_agent
from experiments.commons import study


def test_sustainable_fishers_keep_the_lake_for_all_twelve_rounds():
    """Each takes floor((S - 50) / 4): 12 at 100 (48 caught, 52 left, regrowing to
    52 + 52 x 48 / 100 = 76), then 6 at 76 (24 caught, back to 52 and 76) every round after:
    48 + 11 x 24 = 312 tons of the optimum 375, equal catches."""
    out = study.self_play("s", make_agent("sustainable"), 3)
    assert out["rounds"] == [12.0] * 3 and out["collapsed"] == [0.0] * 3
    assert out["harvest_share"] == pytest.approx([312 / 375] * 3)
    assert out["gini"] == pytest.approx([0.0] * 3)


def test_greedy_fishers_empty_it_in_the_first_round():
    """Four asks of 25 take the whole stock of 100: nothing left, a collapse in round 1."""
    out = study.self_play("g", make_agent("greedy"), 3)
    assert out["rounds"] == [1.0] * 3 and out["collapsed"] == [1.0] * 3
    assert out["harvest_share"] == pytest.approx([100 / 375] * 3)


def test_the_arms_are_paired_match_by_match():
    a = study.self_play("s", make_agent("sustainable"), 4)
    b = study.self_play("g", make_agent("greedy"), 4)
    assert study.paired(a["rounds"], b["rounds"]) == {"mean": 11.0, "ci": [11.0, 11.0]}


def test_the_figure_is_drawn(tmp_path):
    rows = [
        {
            "seed": s,
            "aa": {"rounds": 8.0},
            "mars": {"rounds": 2.0},
            "aa_minus_mars": {"rounds": {"mean": 6.0, "ci": [5.0, 7.0]}},
        }
        for s in (80, 81)
    ]
    study.figure(rows, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000
