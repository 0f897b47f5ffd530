"""The Trust-and-Split study's measures on scripted agents with hand-computed figures, and one
tiny end-to-end run (train 1 step, evaluate, table, figure)."""

import json

import pytest

from agents import make_agent
from evaluation.run import play_suite
from evaluation.social import replay
from evaluation.suites import EvalGame
from experiments.trust_and_split.study import (
    OPPONENTS,
    figure,
    main,
    markdown,
    paired_welfare,
    summarise,
)

HAND_MESSAGES = {"rounds": 5, "messages": "hand", "state_rounds": 1, "state_progress": False}


def scripted(strategy: str, matches: int = 6, params: dict = HAND_MESSAGES):
    records = list(
        play_suite(
            {"agent": make_agent(strategy)},
            [EvalGame("trust_and_split", params=dict(params), opponents=list(OPPONENTS))],
            matches=matches,
            seed=3,
        )
    )
    return records, summarise(records, strategy, 0, {"minutes": 0.0, "steps": 0})


def lost_rounds(records, agent="agent"):
    """Per match against always_defect: the rounds the agent's hand lost (from the dealt hands)."""
    out = []
    for rec in records:
        if "always_defect" not in rec.seats.values():
            continue
        env = replay(rec)
        p = env.possible_agents.index(next(s for s, w in rec.seats.items() if w == agent))
        out.append([res.values[p] == 1.0 for res in env.results])
    return out


def test_cooperators_reach_the_social_optimum_and_greed_half_of_it():
    _, coop = scripted("always_cooperate")
    # honest messages, every coin to the winning hand: 10 coins x 10 points, the optimum
    assert (coop.welfare, coop.honest, coop.claim_win, coop.claim_lose) == (1.0, 1.0, 10.0, 0.0)
    _, greedy = scripted("always_defect")
    # 5 coins each every round: 50 to the winning hand, 5 to the losing one, of 100
    assert greedy.welfare == pytest.approx(0.55)
    assert (greedy.claim_win, greedy.claim_lose) == (10.0, 10.0)
    # against itself it earns exactly the mutual-greed bar
    assert greedy.payoff_greedy == pytest.approx(greedy.greedy_bar) and greedy.not_exploited


def test_with_both_hands_shown_there_are_no_messages_to_score_and_the_split_is_the_same():
    _, coop = scripted("always_cooperate", params={**HAND_MESSAGES, "messages": "reveal"})
    assert (coop.welfare, coop.honest, coop.claim_win, coop.claim_lose) == (1.0, None, 10.0, 0.0)
    assert "| - |" in markdown([coop])


def test_a_cooperator_loses_five_points_each_losing_round_against_greed():
    # 30 matches: enough for the paired interval against tit-for-tat to exclude 0
    records, coop = scripted("always_cooperate", 30)
    lost = lost_rounds(records)
    # claiming 0 with the losing hand earns 0 where mutual greed earns 5 coins x 1 point;
    # with the winning hand both claim 10: 5 coins x 10 either way
    assert coop.payoff_greedy == pytest.approx(
        coop.greedy_bar - 5 * sum(map(sum, lost)) / len(lost)
    )
    assert not coop.not_exploited
    records, tft = scripted("tit_for_tat", 30)
    lost = lost_rounds(records)
    # greed defects only when its hand loses (a claim over half with the losing hand), so
    # tit-for-tat retaliates only in the round after one it won: it concedes 5 in a lost
    # round that is the first or follows another lost round
    conceded = [
        sum(5 for k, lost_k in enumerate(r) if lost_k and (k == 0 or r[k - 1])) for r in lost
    ]
    assert tft.payoff_greedy == pytest.approx(tft.greedy_bar - sum(conceded) / len(conceded))
    assert tft.welfare == 1.0
    # the bar is tit-for-tat's own score on the same hands: it is not exploited, and a
    # cooperator that also concedes the lost rounds after a won one is
    assert tft.tft_bar == pytest.approx(tft.payoff_greedy) and tft.not_exploited
    assert coop.tft_bar == pytest.approx(tft.tft_bar)
    assert tft.vs_tft == pytest.approx((0.0, 0.0, 0.0))
    # the cooperator concedes, beyond tit-for-tat, every lost round that follows a won one
    beyond = [
        sum(5 for k, lost_k in enumerate(r) if lost_k and k > 0 and not r[k - 1]) for r in lost
    ]
    assert coop.vs_tft[0] == pytest.approx(-sum(beyond) / len(beyond))
    assert coop.vs_tft[2] < 0  # significantly below tit-for-tat: exploited


def test_welfare_is_paired_over_the_same_matches():
    _, coop = scripted("always_cooperate")
    _, greedy = scripted("always_defect")
    m, lo, hi, n = paired_welfare(coop, greedy)
    assert (m, lo, hi) == pytest.approx((0.45, 0.45, 0.45)) and n == 6
    table = markdown([coop, greedy])
    assert "+0.450 [+0.450, +0.450]" not in table  # rows pair only estimators named so
    coop.estimator, greedy.estimator = "advantage_alignment", "mars"
    assert "| 0 | +0.450 [+0.450, +0.450] | 6 |" in markdown([coop, greedy])


def test_table_and_figure(tmp_path):
    _, coop = scripted("always_cooperate", 2)
    _, greedy = scripted("always_defect", 2)
    coop.estimator, greedy.estimator = "advantage_alignment", "mars"
    figure([coop, greedy], tmp_path / "fig.png")
    assert (tmp_path / "fig.png").stat().st_size > 0


def test_end_to_end_tiny_study(tmp_path):
    cfg = tmp_path / "tas.yaml"
    cfg.write_text(
        open("experiments/trust_and_split/train_tas_aa.yaml")
        .read()
        .replace("matches_per_step: 24", "matches_per_step: 4")
        .replace("concurrency: 24", "concurrency: 4")
    )
    args = ["--config", str(cfg), "--seeds", "3", "--steps", "1", "--matches", "2"]
    results = main([*args, "--out", str(tmp_path / "out")])
    assert [r.estimator for r in results] == ["advantage_alignment", "mars"]
    assert all(0 < r.welfare <= 1 and 0 <= r.honest <= 1 for r in results)
    assert set(results[0].welfare_by_match) == set(results[1].welfare_by_match)
    saved = json.loads((tmp_path / "out" / "trust_and_split.json").read_text())
    assert len(saved) == 2 and (tmp_path / "out" / "trust_and_split.png").stat().st_size > 0
    # another evaluation seed: the trained runs are evaluated again on other matches, in
    # files beside the first seed's, which stay as they were
    first = (tmp_path / "out" / "trust_and_split.json").read_text()
    again = main([*args, "--out", str(tmp_path / "out"), "--eval-seed", "11"])
    assert (tmp_path / "out" / "trust_and_split.json").read_text() == first
    assert len(json.loads((tmp_path / "out" / "trust_and_split_seed11.json").read_text())) == 2
    assert (tmp_path / "out" / "advantage_alignment_s3" / "eval_step1_seed11").is_dir()
    assert [r.train_minutes for r in again] == [r.train_minutes for r in results]  # not retrained
    again = main([*args, "--out", str(tmp_path / "out")])
    assert [r.welfare for r in again] == [r.welfare for r in results]  # not trained again


def test_free_messages_add_the_message_and_base_columns():
    """Free messages: the cooperator's messages name its hand truly; blanked, two cooperators
    hear no hand and each claims half (welfare 0.55, so the messages gain 0.45). `base` (here
    a greedy bot so named) takes 5 coins of a round the agent's hand wins (50 to the agent, 5
    to base) and all 10 of a round it loses (0 and 100)."""
    free = {"rounds": 5, "messages": "free", "state_rounds": 1, "state_progress": False}
    base = {"type": "always_defect", "name": "base"}
    game = EvalGame("trust_and_split", params=free, opponents=[*OPPONENTS, base])
    game.blank_messages = True
    records = list(play_suite({"agent": make_agent("always_cooperate")}, [game], matches=4, seed=3))
    row = summarise(records, "always_cooperate", 0, {"minutes": 0.0, "steps": 0})
    assert (row.truthful, row.welfare, row.blanked_welfare) == (1.0, 1.0, pytest.approx(0.55))
    assert row.messages_gain == pytest.approx((0.45, 0.45, 0.45))
    lost = []
    for rec in records:
        if "base" in rec.seats.values() and "blanked" not in rec.match_id:
            env = replay(rec)
            p = env.possible_agents.index(next(s for s, w in rec.seats.items() if w == "agent"))
            lost.append(sum(res.values[p] == 1.0 for res in env.results))
    mine = [50 * (5 - k) for k in lost]
    theirs = [5 * (5 - k) + 100 * k for k in lost]
    assert row.payoff_base == pytest.approx(sum(mine) / 4)
    assert row.base_payoff == pytest.approx(sum(theirs) / 4)
    assert row.vs_base[0] == pytest.approx((sum(mine) - sum(theirs)) / 4)
    assert "| always_cooperate | 0 | 1.00 (" in markdown([row])
