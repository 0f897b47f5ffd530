"""The bots know their limits: one-line refusals before any match, CFR on N-player Kuhn."""

import pyspiel
import pytest
from open_spiel.python.algorithms import exploitability as os_expl

from agents import check_spec, make_agent
from agents.base import WrongGame
from agents.bots import CFR_MAX_HISTORIES, cfr_policy, tree_size
from cli.main import main as arena_main


@pytest.mark.parametrize(
    "spec, game, params, words",
    [
        ("minimax", "kuhn_poker", {}, "minimax needs a two-player zero-sum deterministic"),
        ("minimax", "openspiel:kuhn_poker", {"players": 3}, "minimax needs a two-player"),
        ("minimax", "connect_four", {}, "give a depth, e.g. minimax:5"),
        ("minimax:2", "public_goods", {}, "minimax bot plays OpenSpiel games only"),
        ("mcts", "leduc_poker", {}, "mcts needs a perfect-information sequential game"),
        ("mcts", "prisoners_dilemma", {}, "mcts bot plays OpenSpiel games only"),
        ("cfr", "tic_tac_toe", {}, "cfr solves kuhn_poker and leduc_poker"),
        ("cfr", "openspiel:leduc_poker", {"players": 3}, "leduc_poker(players=3) has more"),
        ("tit_for_tat", "tic_tac_toe", {}, "cannot play 'tic_tac_toe'"),
    ],
)
def test_a_bot_refuses_a_game_it_cannot_play_in_one_line(spec, game, params, words):
    with pytest.raises(WrongGame) as e:
        check_spec(spec, [(game, params)])
    assert words in str(e.value) and "\n" not in str(e.value)


def test_bots_accept_the_games_they_play():
    check_spec("minimax", [("tic_tac_toe", {})])
    check_spec("minimax:3", [("connect_four", {})])
    check_spec("mcts", [("openspiel:tic_tac_toe", {})])
    check_spec("cfr", [("kuhn_poker", {}), ("leduc_poker", {})])
    check_spec("cfr", [("openspiel:kuhn_poker", {"players": 3})])
    check_spec("always_defect", [("public_goods", {"num_players": 6})])
    check_spec("random", [("openspiel:leduc_poker", {"players": 3})])


def test_tree_size_counts_histories_and_stops_at_the_limit():
    # Kuhn: the deal (the root, 3 first cards), then 6 betting trees of 9 histories each: the
    # first decision, Pass and Bet, two after Pass, two after Pass-Bet, two after Bet
    kuhn = pyspiel.load_game("kuhn_poker")
    assert tree_size(kuhn, 1000) == 1 + 3 + 6 * 9
    assert tree_size(kuhn, 10) is None
    assert tree_size(pyspiel.load_game("leduc_poker", {"players": 3}), CFR_MAX_HISTORIES) is None


def test_cfr_tables_are_per_game_and_params(tmp_path, monkeypatch):
    """3-player Kuhn has its own table (the 2-player one lacks its information states) and the
    default 300 CFR+ iterations are near a Nash equilibrium: NashConv under 0.05 by OpenSpiel."""
    monkeypatch.setenv("SELFPLAY_ARENA_CACHE", str(tmp_path))
    two, three = pyspiel.load_game("kuhn_poker"), pyspiel.load_game("kuhn_poker", {"players": 3})
    t2, t3 = cfr_policy(two), cfr_policy(three)
    assert len(t2) == 12 and len(t3) == 48 and not set(t3) <= set(t2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "cfr_kuhn_poker_300.json",
        "cfr_kuhn_poker_players=3_300.json",
    ]
    from open_spiel.python import policy

    table = policy.TabularPolicy(three)
    for state in table.states:
        for a, p in t3[state.information_state_string()]:
            table.policy_for_key(state.information_state_string())[a] = p
    assert os_expl.nash_conv(three, table) < 0.05


def test_arena_play_refuses_before_any_match_and_cfr_plays_three_player_kuhn(tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    code = arena_main(["play", "kuhn_poker", "--agents", "minimax", "random", "--out", str(out)])
    err = capsys.readouterr().err
    assert code != 0 and "minimax needs a two-player zero-sum" in err and err.count("\n") == 1
    assert not out.exists()
    args = ["play", "openspiel:kuhn_poker", "--param", "players=3"]
    assert arena_main([*args, "--agents", "random", "cfr", "random", "--matches", "3"]) == 0
    assert "cfr" in capsys.readouterr().out


def test_cfr_solver_option_is_checked():
    with pytest.raises(ValueError, match="cfr solver must be one of cfr\\+, cfr"):
        make_agent("cfr,solver=dcfr")
