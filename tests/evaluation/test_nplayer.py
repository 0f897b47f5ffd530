"""Evaluation with more than two seats: ranks instead of non-losing, N-player social rows, NashConv."""

import json

import pyspiel
import pytest
from open_spiel.python.algorithms import cfr
from open_spiel.python.algorithms import exploitability as os_expl

from agents import make_agent
from cli.main import main as arena_main
from core.records import MatchRecord, outcomes
from evaluation.exploitability import estimated_histories, exploitability
from evaluation.metrics import cells, paired, summary, win_loss_game
from evaluation.run import play_suite
from evaluation.social import gini, social_rows
from evaluation.suites import EvalGame

SEATS = ("player_0", "player_1", "player_2")


def _three(k: int, who: str, returns: list[float]) -> MatchRecord:
    """A 3-player Kuhn match (number k) with `who` in seat k % 3 and these returns (seat order)."""
    seats = {p: who if i == k % 3 else f"random#{i}" for i, p in enumerate(SEATS)}
    rets = dict(zip(SEATS, returns))
    mid = f"{who}|00.openspiel:kuhn_poker|00.random|{k:05d}"
    return MatchRecord(
        mid, "openspiel:kuhn_poker", {"players": 3}, 0, seats, [], rets, outcomes(rets)
    )


def _mine(k: int, value: float, rest: float) -> list[float]:
    """Returns with `value` in seat k % 3 and `rest` elsewhere."""
    return [value if i == k % 3 else rest for i in range(3)]


def test_which_games_keep_win_draw_loss():
    assert win_loss_game("tic_tac_toe", 2) and win_loss_game("kuhn_poker", 2)
    assert not win_loss_game("openspiel:kuhn_poker", 3)  # more than two players
    assert not win_loss_game("prisoners_dilemma", 2) and not win_loss_game("public_goods", 4)
    assert not win_loss_game("negotiation", 2)  # general-sum


def test_rank_win_and_no_non_losing_in_a_three_player_game_by_hand():
    """Six matches, the agent in seat k % 3, finishing 1st alone, 2nd, tied with all (rank 2), 2nd,
    3rd, 2nd: ranks 1, 2, 2, 2, 3, 2, mean 2, sample sd sqrt(2 / 5), t(0.975, 5) = 2.570582."""
    rows = [[3, 1, -1], [1, 0, -1], [0, 0, 0], [1, 2, 0], [0, -2, 2], [-1, 2, 0]]
    recs = [_three(k, "agent", [float(x) for x in r]) for k, r in enumerate(rows)]
    pooled = next(c for c in cells(recs, "agent") if c.seat == "all")
    half = 2.570582 * (2 / 5) ** 0.5 / 6**0.5
    assert pooled.rank == pytest.approx(2.0)
    assert pooled.rank_ci == pytest.approx((2 - half, 2 + half), rel=1e-5)
    assert (pooled.wins, pooled.draws, pooled.losses) == (1, 1, 4)  # first alone; all tied
    assert pooled.win_rate == pytest.approx(1 / 6) and pooled.non_losing is None
    [row] = summary(cells(recs, "agent"))
    assert row["non_losing"] is None and row["rank"] == pytest.approx(2.0)
    assert row["cooperation"] is None  # not a dilemma


def test_paired_rank_difference_is_lower_for_the_better_agent():
    """On the same six matches the agent always finishes first (rank 1), the baseline last (3)."""
    agent = [_three(k, "agent", _mine(k, 2.0, 0.5)) for k in range(6)]
    base = [_three(k, "baseline", _mine(k, -1.0, 0.5)) for k in range(6)]
    pooled = [p for p in paired(agent + base) if p.opponent == "all"][0]
    assert pooled.points is None and pooled.non_losing is None
    assert (pooled.rank.agent, pooled.rank.baseline, pooled.rank.diff) == (1.0, 3.0, -2.0)
    assert pooled.rank.verdict == "better" and pooled.rank.ci == (-2.0, -2.0)
    assert pooled.win_rate.diff == 1.0


def test_gini_by_hand():
    assert gini([5, 5, 5]) == 0.0 and gini([0, 0, 0]) == 0.0
    assert gini([0, 0, 0, 4]) == pytest.approx(3 / 4)  # (n - 1) / n: one has everything
    assert gini([1, 2, 3]) == pytest.approx(8 / 36)  # sum |xi - xj| = 8 over 2 n^2 mean = 36


def test_public_goods_rows_of_a_cooperator_among_defectors_by_hand():
    """always_cooperate among 3 always_defect (n=4, endowment 10, multiplier 1.6, 10 rounds):
    each round the pot 10 x 1.6 = 16 gives 4 to each; the agent gets 4, the others 14. Over the
    match 40 and 3 x 140 = 460 of the optimum 10 rounds x 4 x 10 x 1.6 = 640."""
    game = EvalGame("public_goods", opponents=["always_defect"])
    recs = list(play_suite({"agent": make_agent("always_cooperate")}, [game], matches=4))
    (row,) = social_rows(recs, "agent")
    assert row.contribution == 1.0 and row.cooperation == 1.0
    assert row.welfare == pytest.approx(460 / 640)
    assert row.gini == pytest.approx(600 / (2 * 16 * 115))  # 3 pairs of 100, both orders
    pooled = next(c for c in cells(recs, "agent") if c.seat == "all")
    assert pooled.rank == 4.0 and pooled.win_rate == 0.0 and pooled.non_losing is None
    assert pooled.mean_return == 40.0 and pooled.cooperation == 1.0


def test_ten_seat_public_goods_welfare_from_the_closed_form_optimum():
    """always_defect among 9 tit_for_tat (n=10): round 1 the 9 put in 90, the pot 144 gives 14.4
    each (agent 24.4, others 14.4: 154 in all); then everyone keeps 10 (100 a round). 1054 of
    10 x 10 x 10 x 1.6 = 1600; the agent is first alone every match."""
    game = EvalGame("public_goods", opponents=["tit_for_tat"], params={"num_players": 10})
    recs = list(play_suite({"agent": make_agent("always_defect")}, [game], matches=10))
    assert {len(r.seats) for r in recs} == {10} and len(recs) == 10
    (row,) = social_rows(recs, "agent")
    assert row.welfare == pytest.approx(1054 / 1600) and row.contribution == 0.0
    seat_cells = [c for c in cells(recs, "agent") if c.seat != "all"]
    assert len(seat_cells) == 10 and all(c.rank == 1.0 and c.win_rate == 1.0 for c in seat_cells)


def test_nash_conv_of_random_and_cfr_on_three_player_kuhn():
    """Through the evaluation path (the agent's distributions at every information state of
    openspiel:kuhn_poker with players=3): uniform random has OpenSpiel's NashConv 2.0625; vanilla
    CFR after 100 iterations what OpenSpiel's Python CFRSolver reaches (~0.037); the default cfr
    (300 CFR+ iterations) under 0.05."""
    params = {"players": 3}
    rand = exploitability(make_agent("random"), "openspiel:kuhn_poker", params)
    assert rand.nash_conv == pytest.approx(2.0625) and rand.exploitability is None
    assert rand.states == 48
    game = pyspiel.load_game("kuhn_poker", params)
    solver = cfr.CFRSolver(game)
    for _ in range(100):
        solver.evaluate_and_update_policy()
    expected = os_expl.nash_conv(game, solver.average_policy())
    vanilla = exploitability(make_agent("cfr:100,solver=cfr"), "openspiel:kuhn_poker", params)
    assert vanilla.nash_conv == pytest.approx(expected, abs=1e-6) and 0.03 < expected < 0.04
    default = exploitability(make_agent("cfr"), "openspiel:kuhn_poker", params)
    assert default.nash_conv < 0.05 and default.method == "exact"


def test_a_large_tree_is_refused_with_a_time_estimate():
    """3-player Leduc: 25,800 information states, over the default budget; the refusal is one line."""
    with pytest.raises(ValueError) as e:
        exploitability(make_agent("random"), "openspiel:leduc_poker", {"players": 3})
    msg = str(e.value)
    assert "more than 5000 information states" in msg and "NashConv would take about" in msg
    assert "\n" not in msg


def test_knuth_estimate_of_the_tree_size():
    """3-player Kuhn has 617 histories (counted by walking OpenSpiel's tree here)."""
    game = pyspiel.load_game("kuhn_poker", {"players": 3})
    stack, count = [game.new_initial_state()], 0
    while stack:
        state = stack.pop()
        count += 1
        if not state.is_terminal():
            stack.extend(state.child(a) for a in state.legal_actions())
    assert count == 617
    assert estimated_histories(game, probes=2000) == pytest.approx(count, rel=0.15)


def test_arena_eval_on_public_goods_reports_ranks_not_non_losing(tmp_path, capsys):
    out = tmp_path / "ev"
    code = arena_main(
        ["eval", "--agent", "random", "--games", "public_goods", "--opponents", "tit_for_tat",
         "--matches", "4", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    text = capsys.readouterr().out
    assert "ranked games" in text and "non-losing" not in text and "cooperation" in text
    rows = json.loads((out / "eval.json").read_text())
    cell = next(r for r in rows if r["kind"] == "cell" and r["seat"] == "all")
    assert cell["non_losing"] is None and 1 <= cell["rank"] <= 4 and cell["matches"] == 4
    social = next(r for r in rows if r["kind"] == "social")
    assert 0 <= social["gini"] < 1 and social["contribution"] is not None


def test_in_a_game_of_dealt_teams_the_agent_plays_each_team_of_every_deal():
    """Werewolf deals wolves and village at reset: the two matches of a deal share its seed,
    the agent plays every seat of the wolves in one and of the village in the other (the
    roles read from the env reset with the match's seed), and an opponent every other seat."""
    import games
    from evaluation.run import suite_agents
    from evaluation.suites import plans

    g = EvalGame(name="werewolf", opponents=["werewolf_heuristic"])
    ps = plans("agent", [g], matches=6, seed=0)
    assert len(ps) == 6 and len({p.seed for p in ps}) == 3
    for a, b in zip(ps[::2], ps[1::2]):
        assert a.seed == b.seed
        env = games.make("werewolf")
        env.reset(seed=a.seed)
        wolves = {i for i in range(6) if env.unwrapped.roles[f"player_{i}"] == "werewolf"}
        mine = [{i for i, n in enumerate(p.seats) if n.split("#")[0] == "agent"} for p in (a, b)]
        assert sorted(map(sorted, mine)) == sorted([sorted(wolves), sorted(set(range(6)) - wolves)])
        for p in (a, b):
            names = [n for n in p.seats if n.split("#")[0] == "agent"]
            assert names == ["agent"] + [f"agent#{j}" for j in range(2, len(names) + 1)]
    random = make_agent("random", "random")
    agents = suite_agents({"agent": random}, [g], {p.match_id: p.seed for p in ps})
    assert all(agents[n].agent is random for p in ps for n in p.seats if n.startswith("agent"))


FIELD3 = {"field": ["tit_for_tat", "always_defect", "always_cooperate"]}


def test_a_field_fills_the_other_seats_each_member_in_every_seat_equally():
    """Public goods (4 seats) against a field of three: every match seats each member once, and
    over 12 matches (3 deals x 4 agent seats) every member sits in every seat 3 times."""
    from collections import Counter

    from evaluation.suites import plans

    ps = plans("agent", [EvalGame("public_goods", opponents=[FIELD3])], matches=12, seed=0)
    assert len(ps) == 12
    where = Counter()
    for p in ps:
        assert sorted(n for n in p.seats if n != "agent") == sorted(FIELD3["field"])
        where.update((n, s) for s, n in enumerate(p.seats))
        assert "|00.field(tit_for_tat,always_defect,always_cooperate)|" in p.match_id
    assert set(where.values()) == {3} and len(where) == 16


def test_a_cooperator_in_a_mixed_field_by_hand():
    """always_cooperate with always_defect and two always_cooperate (n=4, endowment 10, x1.6, 10
    rounds): each round 30 goes in, the pot 48 gives 12 each: the agent 120 a match, the
    defector 220; welfare 580 of 640; the agent tied 2nd-4th with the cooperators: rank 3."""
    field = {"field": ["always_defect", "always_cooperate", "always_cooperate"], "name": "mixed"}
    game = EvalGame("public_goods", opponents=[field])
    recs = list(play_suite({"agent": make_agent("always_cooperate")}, [game], matches=8))
    assert all(len(set(r.seats.values())) == 4 for r in recs)  # always_cooperate#2 apart
    (row,) = social_rows(recs, "agent")
    assert row.opponent == "mixed" and row.welfare == pytest.approx(580 / 640)
    pooled = next(c for c in cells(recs, "agent") if c.seat == "all")
    assert pooled.opponent == "mixed" and pooled.mean_return == 120.0 and pooled.rank == 3.0


def test_arena_eval_takes_a_field_on_the_command_line(tmp_path):
    out = tmp_path / "ev"
    code = arena_main(
        ["eval", "--agent", "always_defect", "--games", "public_goods", "--opponents",
         "field:tit_for_tat,always_cooperate", "always_defect", "--matches", "4", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    rows = json.loads((out / "eval.json").read_text())
    opponents = {r["opponent"] for r in rows if r["kind"] == "cell"}
    assert opponents == {"field(tit_for_tat,always_cooperate)", "always_defect"}


@pytest.mark.parametrize(
    "bad, says",
    [("field:", "non-empty list"), ({"field": [{"field": ["random"]}]}, "not fields"),
     ({"field": ["random"], "seats": 2}, "keys field and name")],
)  # fmt: skip
def test_a_bad_field_is_one_line(bad, says):
    from evaluation.suites import game_spec

    with pytest.raises(ValueError, match=says) as e:
        game_spec({"name": "public_goods", "opponents": [bad]})
    assert "\n" not in str(e.value) and "public_goods" in str(e.value)
