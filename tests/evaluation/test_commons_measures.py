"""commons measures by hand on crafted matches, and `arena play` / `eval` / `tournament` on
commons from the command line."""

import json

import pytest
import yaml
from scipy import stats

from cli.main import main as arena_main
from core.records import MatchRecord, TurnRecord, outcomes, read_jsonl
from evaluation.commons import commons_rows
from evaluation.social import social_rows
from games.commons import sustainable_optimum
from tournaments.run import load_tournament

PARAMS = {"num_players": 3, "rounds": 3, "discussion": False}


def crafted(
    k: int, seats: list[str], rounds: list[tuple[int, int, int]], catches: list[int]
) -> MatchRecord:
    """A match of 3-player, 3-round commons without discussion: the asks of each round and
    each player's total catch (its return)."""
    turns = [
        TurnRecord(-1, f"player_{p}", seats[p], str(a), a)
        for asks in rounds
        for p, a in enumerate(asks)
    ]
    players = {f"player_{p}": name for p, name in enumerate(seats)}
    opponent = next(s for s in seats if s != "agent")
    mid = f"agent|00.commons|{'00' if opponent == 'x' else '01'}.{opponent}|{k:05d}"
    returns = {p: float(c) for p, c in zip(players, catches)}
    return MatchRecord(mid, "commons", PARAMS, k, players, turns, returns, outcomes(returns))


def matches() -> list[MatchRecord]:
    """A: 75 of 100 caught, 25 left regrow to 43; then 55 asked of 43 scale to 8, 16, 19 (7.8,
    15.6, 19.5: remainders 45, 35, 30 of 55 give the 2 spare tons to seats 0 and 1) and the lake
    dies out. Catches 33, 41, 44 (118), Gini 2 (8 + 11 + 3) / (2 x 9 x 118 / 3) = 44 / 708.
    B: 48 (52 left, 76), 24 (52, 76), then 75 leaves 1: a collapse in the last round; 49 each.
    C: 30 a round: 100 -> 70 -> 91 -> 61 -> 84 -> 54 -> 78, no collapse; 30 each."""
    return [
        crafted(0, ["agent", "x", "x#2"], [(25, 25, 25), (10, 20, 25)], [33, 41, 44]),
        crafted(1, ["x", "agent", "x#2"], [(16, 16, 16), (8, 8, 8), (25, 25, 25)], [49] * 3),
        crafted(2, ["y", "y#2", "agent"], [(10, 10, 10)] * 3, [30] * 3),
    ]


def t_interval(values):
    """The 95% t interval of the mean, from scipy."""
    if len(set(values)) == 1:
        return (values[0], values[0])
    lo, hi = stats.t.interval(
        0.95, len(values) - 1, loc=stats.tmean(values), scale=stats.sem(values)
    )
    return (lo, hi)


def test_the_optimum_of_three_rounds_by_hand():
    """Each round at most 75 (3 x 25). Leaving L in round 1 gives 100 - L + regrow(L) - 50 by
    round 2 (leaving 50, which regrows to 75), then 75: largest at L = 50, 125 - 50 + 75."""
    assert sustainable_optimum(PARAMS) == 150


def test_commons_rows_by_hand():
    x, y, pooled = commons_rows(matches(), "agent")
    assert (x.opponent, y.opponent, pooled.opponent) == ("x", "y", "all")
    assert x.matches == 2 and x.rounds == 2.5 and x.rounds_ci == pytest.approx(t_interval([2, 3]))
    assert x.collapsed == 1.0 and x.collapsed_ci[1] == 1.0
    assert x.harvest_share == pytest.approx((118 + 147) / 300)
    assert x.harvest_share_ci == pytest.approx(t_interval([118 / 150, 147 / 150]))
    assert x.gini == pytest.approx(44 / 708 / 2) and x.agent_catch == (33 + 49) / 2
    assert (y.matches, y.rounds, y.rounds_ci, y.collapsed) == (1, 3.0, (3.0, 3.0), 0.0)
    assert y.harvest_share == pytest.approx(90 / 150) and y.gini == 0.0 and y.agent_catch == 30
    assert pooled.matches == 3 and pooled.rounds == pytest.approx(8 / 3)
    assert pooled.harvest_share == pytest.approx(355 / 450) and pooled.agent_catch == 112 / 3
    assert pooled.collapsed == pytest.approx(2 / 3)


def test_social_rows_read_commons_cooperation_and_welfare_against_the_optimum():
    """Cooperating = asking at most floor(max(0, S - 50) / 3): 16 at 100, 8 at 76, 0 at 43.
    Against x the agent asked 25 (100), 10 (43); 16 (100), 8 (76), 25 (76): 2 of 5 rounds."""
    x = next(r for r in social_rows(matches(), "agent") if r.opponent == "x")
    assert x.rounds == 5 and x.cooperation == pytest.approx(2 / 5)
    assert x.welfare == pytest.approx((118 + 147) / 300)


def test_arena_play_commons_from_the_cli(tmp_path):
    """Match 0 seats sustainable, greedy, sustainable, greedy: 12 + 25 + 12 + 25 = 74 leaves 26,
    which regrow to 45; then the sustainable share is 0 and the greedy ask 50 of 45: 22.5 each,
    the spare ton to the lower seat (player_1 23, player_3 22), and the lake dies out."""
    out = tmp_path / "m.jsonl"
    code = arena_main(
        [
            "play",
            "commons",
            "--agents",
            "sustainable",
            "greedy",
            "--matches",
            "2",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    first = next(r for r in read_jsonl(out) if r.match_id.endswith("00000"))
    assert first.returns == {"player_0": 12.0, "player_1": 48.0, "player_2": 12.0, "player_3": 47.0}
    assert first.turns[0].move == "I will take 12."


def test_arena_play_refuses_a_commons_bot_on_another_game(capsys):
    assert arena_main(["play", "tic_tac_toe", "--agents", "greedy", "random"]) != 0
    assert "plays commons only" in capsys.readouterr().err


def test_arena_eval_on_commons_reports_its_rows(tmp_path, capsys):
    """sustainable among three greedy: 12 + 75 leave 13, which regrow to 24; the agent then asks
    0 (24 < 50), the greedy take 8 each and the lake dies out. Catches 12, 33, 33, 33 (111 of the
    optimum 375); Gini 2 x 3 x 21 / (2 x 16 x 27.75)."""
    out = tmp_path / "ev"
    code = arena_main(
        ["eval", "--agent", "sustainable", "--games", "commons", "--opponents", "greedy",
         "--matches", "4", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    assert "commons: rounds played" in capsys.readouterr().out
    rows = json.loads((out / "eval.json").read_text())
    (row,) = [r for r in rows if r["kind"] == "commons"]
    assert row["matches"] == 4 and row["rounds"] == 2.0 and row["collapsed"] == 1.0
    assert row["harvest_share"] == pytest.approx(111 / 375)
    assert row["gini"] == pytest.approx(126 / 888) and row["agent_catch"] == 12.0
    (social,) = [r for r in rows if r["kind"] == "social"]
    assert social["cooperation"] == 1.0 and social["welfare"] == pytest.approx(111 / 375)


def test_arena_tournament_on_commons(tmp_path):
    """Greedy asks the most every round, and shares are in proportion to the asks: it never
    catches less than another player, so it is first in every match."""
    cfg = {
        "name": "commons",
        "format": "round_robin",
        "players": {n: n for n in ("sustainable", "greedy", "tit_for_tat", "random")},
        "games": [{"name": "commons", "params": {"rounds": 3}}],
    }
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(cfg))
    db = tmp_path / "t.db"
    assert arena_main(["tournament", str(path), "--db", str(db)]) == 0
    result = load_tournament(db)
    assert len(result.results) == 4  # one table of four, every seat once
    assert result.outcome.order[0] == "greedy"
