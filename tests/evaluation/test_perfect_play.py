"""evaluation.perfect_play: blunders over every reachable position and a perfect adversary."""

import json

import pyspiel
import pytest
from open_spiel.python.algorithms.get_all_states import get_all_states

from agents import make_agent
from evaluation.exact_vs_random import PolicyTable
from evaluation.perfect_play import perfect_play, reachable


class FirstEmptyCell:
    """Always the lowest-numbered empty cell: a policy a perfect opponent beats."""

    name = "first_empty"

    def act(self, turns):
        raise NotImplementedError  # the walk only reads action_probabilities

    def action_probabilities(self, turns):
        return [{min(t.env.legal_actions(t.player)): 1.0} for t in turns]


def test_minimax_is_perfect_in_both_seats():
    table = PolicyTable(make_agent("minimax", "agent"), "tic_tac_toe")
    for seat in (0, 1):
        row = perfect_play(table, seat)
        assert row.perfect and row.blunder_mass == 0.0
        assert row.adversary_return == 0.0 and row.adversary_loss == 0.0  # tic-tac-toe is a draw


def test_first_empty_cell_loses_to_the_adversary():
    # By hand: X 0, O 1, X 2, O 4, X 3 (first empty), O 7 completes 1-4-7: O wins.
    state = pyspiel.load_game("tic_tac_toe").new_initial_state()
    for a in (0, 1, 2, 4, 3, 7):
        state.apply_action(a)
    assert state.is_terminal() and state.returns() == [-1.0, 1.0]
    row = perfect_play(PolicyTable(FirstEmptyCell(), "tic_tac_toe"), 0)
    assert row.adversary_return == -1.0 and row.adversary_loss == 1.0
    assert row.blunders >= 1 and row.examples


def test_a_stochastic_policy_reaches_every_position_of_its_seat():
    game = pyspiel.load_game("tic_tac_toe")
    every = get_all_states(game, include_terminals=False, include_chance_states=False)
    x_positions = {str(s) for s in every.values() if s.current_player() == 0}
    table = PolicyTable(make_agent("random", "agent"), "tic_tac_toe")
    found = reachable(table, 0)
    assert {str(s) for s in found.values()} == x_positions
    row = perfect_play(table, 0)
    assert row.blunders > 0 and row.adversary_return < 0 < row.adversary_loss


def test_a_game_the_solver_cannot_search_is_refused():
    with pytest.raises(ValueError, match="searches to the end"):
        perfect_play(PolicyTable(make_agent("random", "agent"), "kuhn_poker"), 0)


def test_arena_eval_perfect_play_walks_agent_and_baseline_in_both_seats(tmp_path, capsys):
    """`arena eval --perfect-play`: minimax (the agent) has no blunder and never loses in either
    seat; the random baseline blunders and a perfect adversary beats it; a rerun reads the walk
    from the store; Kuhn poker, which the solver cannot search, is skipped with a line."""
    from cli.main import main as arena_main

    out = tmp_path / "ev"
    argv = ["eval", "--agent", "minimax", "--baseline", "random"]
    argv += ["--games", "tic_tac_toe", "--opponents", "random", "--matches", "2"]
    argv += ["--perfect-play", "--out", str(out)]
    assert arena_main(argv) == 0
    assert "perfect play: every position" in capsys.readouterr().out
    rows = [r for r in json.loads((out / "eval.json").read_text()) if r["kind"] == "perfect_play"]
    walked = {(r["agent"], r["seat"]): r for r in rows}
    assert set(walked) == {(w, s) for w in ("agent", "baseline") for s in (0, 1)}
    assert all(r["game"] == "tic_tac_toe" for r in rows)
    for seat in (0, 1):
        assert walked[("agent", seat)]["blunders"] == 0
        assert walked[("agent", seat)]["adversary_loss"] == 0.0
        assert walked[("baseline", seat)]["blunders"] > 0
        assert walked[("baseline", seat)]["adversary_loss"] > 0
    assert "perfect_play" in (out / "eval.html").read_text()
    assert arena_main(argv) == 0
    again = [r for r in json.loads((out / "eval.json").read_text()) if r["kind"] == "perfect_play"]
    assert again == rows
    kuhn = [
        "eval",
        "--agent",
        "random",
        "--games",
        "kuhn_poker",
        "--matches",
        "2",
        "--perfect-play",
    ]
    assert arena_main([*kuhn, "--out", str(tmp_path / "kuhn")]) == 0
    assert "perfect play: kuhn_poker skipped" in capsys.readouterr().out
