"""Codewords measures on crafted matches, computed by hand (`evaluation.codewords`)."""

from __future__ import annotations

import math

import pytest
from scipy.stats import norm, t

import games
from core.records import Attempt, MatchRecord, TurnRecord
from evaluation.codewords import codewords_rows, seat_results
from games.codewords import PASS

SEED = 5


def crafted_turns() -> list[TurnRecord]:
    """One match on the board of seed SEED, told as a story:

    turn 1 red:  clue "animal 2"; two red words, then a neutral one      red found 2
    turn 2 blue: a first reply the parser refused, then "music 1"; one
                 blue word, then pass                                   blue found 1, violation
    turn 3 red:  "hello there", no clue: void                           red found 0, violation
                 the guesser passes at once
    turn 4 blue: "sky 1"; the assassin: blue loses, red wins           blue found 0
    """
    env = games.make("codewords")
    env.reset(seed=SEED)
    cells = {kind: [k for k, x in enumerate(env.key) if x == kind] for kind in set(env.key)}
    red, blue, neutral, assassin = cells["red"], cells["blue"], cells["neutral"], cells["assassin"]
    rejected = [Attempt("apple 9", error="illegal: a grid word"), Attempt("music 1")]
    story = [
        ("player_0", "animal 2", []),
        ("player_1", red[0], []),
        ("player_1", red[1], []),
        ("player_1", neutral[0], []),
        ("player_2", "music 1", rejected),
        ("player_3", blue[0], []),
        ("player_3", PASS, []),
        ("player_0", "hello there", []),
        ("player_1", PASS, []),
        ("player_2", "sky 1", []),
        ("player_3", assassin[0], []),
    ]
    return [
        TurnRecord(i, p, "x", str(a), a, attempts=list(tries))
        for i, (p, a, tries) in enumerate(story)
    ]


def record(k: int, seat: str) -> MatchRecord:
    seats = {
        p: f"codewords_random#{j}"
        for j, p in enumerate(["player_0", "player_1", "player_2", "player_3"])
    }
    seats[seat] = "agent"
    return MatchRecord(
        f"agent|00.codewords|00.codewords_random|{k:05d}",
        "codewords",
        {},
        SEED,
        seats,
        crafted_turns(),
    )


def test_the_crafted_match_replays_as_told():
    red = seat_results(record(0, "player_0"), "player_0")
    assert (red.won, red.draw, red.assassin, red.found, red.violated) == (
        True,
        False,
        False,
        [2, 0],
        [False, True],
    )
    blue = seat_results(record(0, "player_2"), "player_2")
    assert (blue.won, blue.assassin, blue.found, blue.violated) == (
        False,
        True,
        [1, 0],
        [True, False],
    )
    guesser = seat_results(record(0, "player_1"), "player_1")
    assert (guesser.role, guesser.found, guesser.violated) == ("guesser", [2, 0], [])


def wilson_by_hand(k: int, n: int) -> tuple[float, float]:
    z, p = norm.ppf(0.975), k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo, hi = (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)
    return (0.0 if k == 0 else lo), (1.0 if k == n else hi)


def test_rows_by_hand():
    """The agent holds red's clue-giver in match 0, blue's clue-giver in match 1 and red's
    guesser in match 2: it wins matches 0 and 2 and loses 1 to the assassin."""
    records = [record(0, "player_0"), record(1, "player_2"), record(2, "player_1")]
    rows = {r.side: r for r in codewords_rows(records, "agent")}
    assert list(rows) == ["all", "red", "blue", "clue_giver", "guesser"]
    every = rows["all"]
    assert every.seats == 3 and every.opponent == "codewords_random"
    assert every.win_rate == pytest.approx(2 / 3) and every.win_ci == pytest.approx(
        wilson_by_hand(2, 3)
    )
    assert every.assassin_rate == pytest.approx(1 / 3) and every.draw_rate == 0.0
    # words per clue: per match (found, clues) = (2, 2), (1, 2), (2, 2): 5 / 6
    counts, sizes = [2, 1, 2], [2, 2, 2]
    rate = 5 / 6
    se = math.sqrt(sum((c - rate * n) ** 2 for c, n in zip(counts, sizes)) / (3 * 2)) / 2
    half = t.ppf(0.975, 2) * se
    assert every.clues == 6 and every.words_per_clue == pytest.approx(rate)
    assert every.words_per_clue_ci == pytest.approx((rate - half, rate + half))
    # violations: the clue-givers' four clues, two broke the rule (a void one, a refused reply)
    assert every.violations_per_clue == 0.5 and every.violations_ci == pytest.approx(
        wilson_by_hand(2, 4)
    )
    red, blue = rows["red"], rows["blue"]
    assert (red.seats, red.win_rate, red.assassin_rate, red.words_per_clue) == (2, 1.0, 0.0, 1.0)
    assert red.violations_per_clue == 0.5
    assert (blue.seats, blue.win_rate, blue.assassin_rate, blue.words_per_clue) == (
        1,
        0.0,
        1.0,
        0.5,
    )
    guesser = rows["guesser"]
    assert (guesser.seats, guesser.win_rate, guesser.violations_per_clue) == (1, 1.0, None)
    assert rows["clue_giver"].seats == 2 and rows["clue_giver"].win_rate == 0.5


def test_other_games_and_absent_agents_give_no_rows():
    rec = record(0, "player_0")
    assert codewords_rows([rec], "someone_else") == []
    other = MatchRecord(
        "agent|00.tic_tac_toe|00.random|00000", "tic_tac_toe", {}, 0, {"player_0": "agent"}
    )
    assert codewords_rows([other], "agent") == []


def test_a_forfeited_clue_is_a_violation_and_a_backend_error_is_not():
    seats = {"player_0": "agent", "player_1": "b", "player_2": "c", "player_3": "d"}
    forfeit = TurnRecord(0, "player_0", "agent", "", None, valid=False, fallback="forfeit")
    forfeit.attempts = [
        Attempt("", error="backend_error: timeout"),
        Attempt("hi", error="no_move: x"),
    ]
    rec = MatchRecord("agent|00.codewords|00.o|00000", "codewords", {}, SEED, seats, [forfeit])
    result = seat_results(rec, "player_0")
    assert (result.found, result.violated, result.won, result.draw) == ([0], [True], False, False)
    ok = TurnRecord(0, "player_0", "agent", "music 1", "music 1")
    ok.attempts = [Attempt("", error="backend_error: timeout"), Attempt("music 1")]
    rec = MatchRecord("agent|00.codewords|00.o|00000", "codewords", {}, SEED, seats, [ok])
    assert seat_results(rec, "player_0").violated == [False]


def test_the_seats_of_one_team_count_as_one_team_game():
    rec = record(0, "player_0")
    rec.seats["player_1"] = "agent#2"  # the agent plays red's clue-giver and guesser
    rows = {r.side: r for r in codewords_rows([rec], "agent")}
    every = rows["all"]
    assert (every.seats, every.games, every.win_rate, every.clues) == (2, 1, 1.0, 2)
    assert every.words_per_clue == 1.0 and every.violations_per_clue == 0.5
    assert rows["guesser"].games == rows["clue_giver"].games == 1
