"""Exact play against the random bot (evaluation.exact_vs_random) and the tactic labels of
training turns (experiments.tactic_credit.tactic_credit)."""

import numpy as np
import pyspiel
import pytest

from agents import make_agent
from arena.runner import plan_matches, play
from core.records import MatchRecord, TurnRecord
from evaluation.exact_vs_random import (
    PolicyTable,
    exact_vs_random,
    move_distributions_at,
    tactics,
    winning_cells,
)
from experiments.tactic_credit.tactic_credit import credit_table, tactic
from training.advantages import TurnSample


def _brute_force_random_vs_random(state, p=1.0, out=None):
    """P(X wins), P(draw), P(O wins) of two uniform random players, every move order walked."""
    out = out if out is not None else [0.0, 0.0, 0.0]
    if state.is_terminal():
        r = state.returns()[0]
        out[0 if r > 0 else 1 if r == 0 else 2] += p
        return out
    legal = state.legal_actions()
    for a in legal:
        _brute_force_random_vs_random(state.child(a), p / len(legal), out)
    return out


def test_random_bot_matches_a_brute_force_walk_of_every_move_order():
    x_win, draw, o_win = _brute_force_random_vs_random(
        pyspiel.load_game("tic_tac_toe").new_initial_state()
    )
    x, o = exact_vs_random(PolicyTable(make_agent("random"), "tic_tac_toe"))
    assert (x.win, x.draw, x.loss) == pytest.approx((x_win, draw, o_win), abs=1e-12)
    assert (o.win, o.draw, o.loss) == pytest.approx((o_win, draw, x_win), abs=1e-12)
    assert x.non_losing + o.non_losing < 1.2  # random is far from safe in either seat


def test_perfect_player_never_loses_and_always_blocks():
    table = PolicyTable(make_agent("minimax"), "tic_tac_toe")
    for r in exact_vs_random(table):
        assert r.loss == pytest.approx(0.0, abs=1e-12) and r.non_losing == pytest.approx(1.0)
    for seat in (0, 1):
        t = tactics(table, seat)
        assert (
            t.blocks_made == pytest.approx(1.0)
            and t.block_chances > 0
            and t.entropy == pytest.approx(0.0)
        )


def test_uniform_player_blocks_at_the_share_of_threat_cells():
    # one hand-checked position: X at 0 and 1, O at 4 -> O must block cell 2; random picks it 1/6 of the time
    h = [0, 4, 1]
    assert winning_cells(h, 0) == {2} and winning_cells(h, 1) == set()
    t = tactics(PolicyTable(make_agent("random"), "tic_tac_toe"), seat=1)
    assert (
        0.2 < t.blocks_made < 0.5 and t.entropy > 1.0
    )  # a mix of 1-2 threat cells among 2-7 empty ones


def test_move_distributions_at_given_histories():
    random_dists = move_distributions_at(
        PolicyTable(make_agent("random"), "tic_tac_toe"), [[0, 4, 1], []]
    )
    assert (
        random_dists[0] == pytest.approx({a: 1 / 6 for a in (2, 3, 5, 6, 7, 8)})
        and len(random_dists[1]) == 9
    )
    perfect = move_distributions_at(PolicyTable(make_agent("minimax"), "tic_tac_toe"), [[0, 4, 1]])[
        0
    ]
    assert perfect.get(2, 0.0) == pytest.approx(1.0)  # the block
    with pytest.raises(ValueError, match="not legal"):
        move_distributions_at(PolicyTable(make_agent("random"), "tic_tac_toe"), [[0, 0]])


def test_greedy_tiny_llm_exact_rate_agrees_with_sampled_games():
    agent = make_agent(
        "llm:tiny-llama,constrained=true,temperature=0,prompt=state,max_new_tokens=4", "llm"
    )
    x, o = exact_vs_random(PolicyTable(agent, "tic_tac_toe", {"board": "relative"}))
    assert x.win + x.draw + x.loss == pytest.approx(
        1.0
    ) and o.win + o.draw + o.loss == pytest.approx(1.0)
    hx, ho = exact_vs_random(
        PolicyTable(agent, "tic_tac_toe", {"board": "relative"}, by_history=True)
    )
    assert (hx.win, hx.loss, ho.win, ho.loss) == pytest.approx(
        (x.win, x.loss, o.win, o.loss), abs=1e-9
    )  # merging is exact
    assert hx.positions + ho.positions > x.positions + o.positions
    plans = plan_matches(
        "tic_tac_toe", ["llm", "random"], 200, seed=7, params={"board": "relative"}
    )
    records = list(play(plans, {"llm": agent, "random": make_agent("random")}, concurrency=64))
    for seat, exact in ((0, x), (1, o)):
        games = [r for r in records if r.seats[f"player_{seat}"] == "llm"]
        rate = np.mean([r.outcome[f"player_{seat}"] != "loss" for r in games])
        sd = np.sqrt(exact.non_losing * (1 - exact.non_losing) / len(games))
        assert abs(rate - exact.non_losing) < 4 * sd + 1e-9, (seat, rate, exact.non_losing)


def _record(history: list[int], agents: list[str]) -> MatchRecord:
    turns = [
        TurnRecord(i, f"player_{i % 2}", agents[i % 2], str(a), a) for i, a in enumerate(history)
    ]
    return MatchRecord(
        "m", "tic_tac_toe", {}, 0, {"player_0": agents[0], "player_1": agents[1]}, turns
    )


def test_tactic_labels_hand_checked_positions():
    # X 0, O 4, X 1: O to move with X threatening 2
    assert tactic(_record([0, 4, 1, 2], ["a", "b"]), 3) == "block made"
    assert tactic(_record([0, 4, 1, 8], ["a", "b"]), 3) == "block missed"
    # X 0, O 4, X 1, O 3: X can win at 2; O threatens 5 (a win beats a block)
    assert tactic(_record([0, 4, 1, 3, 2], ["a", "b"]), 4) == "win taken"
    assert tactic(_record([0, 4, 1, 3, 5], ["a", "b"]), 4) == "win missed"
    assert tactic(_record([0, 4], ["a", "b"]), 1) == "other"


def test_credit_table_groups_advantages_by_tactic_and_opponent():
    recs = [_record([0, 4, 1, 2], ["p", "p"]), _record([0, 4, 1, 8], ["p", "random"])]
    samples = [
        TurnSample(0, 3, 0.5, "tic_tac_toe", "player_1", recs[0].turns[3]),
        TurnSample(1, 3, -1.5, "tic_tac_toe", "player_1", recs[1].turns[3]),
        TurnSample(0, 0, 0.25, "tic_tac_toe", "player_0", recs[0].turns[0]),
    ]
    table = credit_table(recs, samples, [None, "random"])
    assert table == {
        ("block made", "self"): [0.5],
        ("block missed", "random"): [-1.5],
        ("other", "self"): [0.25],
    }
