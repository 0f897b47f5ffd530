"""Elimination brackets: standard seeding, byes, N-1 matches, seeds meeting late, best-of-k
series, double elimination with a grand-final reset, and the final ranking."""

import math

import pytest

from tournaments.bracket import double_elimination, seeded_bracket, single_elimination
from tournaments.judge import rank_group, score_judge
from tournaments.rounds import PairResult, drive

SIZES = range(2, 34)


def stronger_wins(pairings):
    """Players are ints, lower = stronger; one result per pairing with all its games won by it."""
    out = []
    for p in pairings:
        a_wins = p.a < p.b
        out.append(
            PairResult(
                p.games * a_wins, p.games * (not a_wins), -p.a * p.games, -p.b * p.games, p.games
            )
        )
    return out


def test_seeded_bracket_hand_computed():
    assert seeded_bracket(2) == [0, 1]
    assert seeded_bracket(4) == [0, 3, 1, 2]
    assert seeded_bracket(8) == [0, 7, 3, 4, 1, 6, 2, 5]  # 1v8, 4v5, 2v7, 3v6
    assert seeded_bracket(5) == [0, None, 3, 4, 1, None, 2, None]
    with pytest.raises(ValueError):
        seeded_bracket(0)


@pytest.mark.parametrize("n", SIZES)
def test_bracket_layout_byes_go_to_top_seeds(n):
    slots = seeded_bracket(n)
    size = 1 << math.ceil(math.log2(n))
    assert len(slots) == size
    assert sorted(s for s in slots if s is not None) == list(range(n))
    pairs = [(slots[2 * i], slots[2 * i + 1]) for i in range(size // 2)]
    byes = [a if b is None else b for a, b in pairs if a is None or b is None]
    assert sorted(byes) == list(range(size - n))  # the top size-n seeds sit out round 1
    assert all(not (a is None and b is None) for a, b in pairs)
    for a, b in pairs:  # first round: seed i meets seed size-1-i
        if a is not None and b is not None:
            assert a + b == size - 1


@pytest.mark.parametrize("n", SIZES)
def test_single_elimination_n_minus_1_matches_and_seeds_meet_late(n):
    players = list(range(n))
    outcome = drive(single_elimination(players, seeding="order"), stronger_wins)
    pairings = [p for rnd in outcome.rounds for p, _ in rnd]
    assert len(pairings) == n - 1
    assert outcome.order == players  # exit round, then mean score: the exact order
    size = 1 << math.ceil(math.log2(n))
    played = [m for m in outcome.bracket if m.result is not None]
    # in bracket round r only the top size/2^(r-1) seeds are left: seeds 1 and 2 meet in the final only
    for m in played:
        assert {m.a, m.b} <= set(range(size >> (m.round - 1))), m
    final = max(played, key=lambda m: m.round)
    assert {final.a, final.b} == {0, 1}
    if n >= 4:
        semis = [m for m in played if m.round == final.round - 1]
        assert {frozenset((m.a, m.b)) for m in semis} == {frozenset((0, 3)), frozenset((1, 2))}


@pytest.mark.parametrize("n", SIZES)
def test_double_elimination_counts_and_order(n):
    outcome = drive(double_elimination(list(range(n)), seeding="order"), stronger_wins)
    pairings = sum(len(rnd) for rnd in outcome.rounds)
    assert pairings == 2 * n - 2  # the winners'-bracket champion wins the grand final: no reset
    assert outcome.order[0] == 0 and outcome.order[1] == 1
    assert sorted(outcome.order) == list(range(n))
    assert outcome.stats[0]["eliminated"] == "champion"


def test_double_elimination_grand_final_reset():
    """b loses the first series, then beats a twice: a reset final, b champion, 2N-1 = 3 series."""
    script = iter([("a", 1.0), ("b", 1.0), ("b", 1.0)])  # winner of W1, GF, GF2

    def play(pairings):
        (p,) = pairings
        winner, _ = next(script)
        pa = 1.0 if p.a == winner else 0.0
        return [PairResult(pa, 1 - pa, pa, 1 - pa, 1)]

    outcome = drive(double_elimination(["a", "b"]), play)
    labels = [p.label for rnd in outcome.rounds for p, _ in rnd]
    assert labels == ["W1", "GF", "GF2"]
    assert outcome.order == ["b", "a"]


def test_best_of_three_stops_at_two_nil():
    outcome = drive(single_elimination(list(range(8)), best_of=3, seeding="order"), stronger_wins)
    series = [m for m in outcome.bracket if m.result is not None]
    assert len(series) == 7
    assert all(m.result.games == 2 and m.result.points_a == 2 for m in series)  # 2-0: no third game
    assert sum(r.games for rnd in outcome.rounds for _, r in rnd) == 14


def test_best_of_three_decider_game_is_played():
    calls = []

    def play(pairings):
        (p,) = pairings
        calls.append((p.first_game, p.games))
        # a wins game 0, b wins game 1, a wins game 2
        pts = [1.0 if g % 2 == 0 else 0.0 for g in range(p.first_game, p.first_game + p.games)]
        return [PairResult(sum(pts), p.games - sum(pts), 0, 0, p.games)]

    outcome = drive(single_elimination(["a", "b"], best_of=3), play)
    assert calls == [(0, 2), (2, 1)]  # two games first, then the decider
    assert outcome.order == ["a", "b"]
    assert outcome.bracket[0].result.points_a == 2


@pytest.mark.parametrize("fmt", ["single_elimination", "double_elimination"])
@pytest.mark.parametrize("n", [4, 5, 8])
def test_level_series_go_to_the_higher_seed(fmt, n):
    # every game a draw with equal scores: each series is level, so the higher seed goes through
    # everywhere, the losers' bracket (where a lower seed may be listed first) included
    order = rank_group(n, score_judge([0.0] * n), fmt, seeding="order", tiebreak="seed")
    assert order == list(range(n))


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13, 16, 33])
def test_arena_rl_seeding_recovers_a_noise_free_order(n):
    """A noise-free judge: anchor seeding + bracket + mean-score tie-breaks give the exact order,
    in (N-1) seeding + (N-1) bracket comparisons."""
    quality = [((7 * i) % n) / n for i in range(n)]  # a scrambled strict order
    calls = {"pairs": 0}
    judge = score_judge(quality)

    def counting(pairs):
        calls["pairs"] += len(pairs)
        return judge(pairs)

    ranks = rank_group(n, counting)
    expected = sorted(range(n), key=lambda i: -quality[i])
    assert [i for i in sorted(range(n), key=lambda i: ranks[i])] == expected
    assert calls["pairs"] == 2 * n - 2


def test_seeding_from_ratings_and_tiebreaks():
    ratings = {"c": 2.0, "a": 4.0, "d": 1.0, "b": 3.0}
    gen = single_elimination(list(ratings), seeding="ratings", ratings=ratings)
    first_round = next(gen)
    assert {frozenset((p.a, p.b)) for p in first_round} == {
        frozenset(("a", "d")),
        frozenset(("b", "c")),
    }
    loser_score = {"a": 0.5, "b": 0.5, "c": 0.1, "d": 0.9}  # d loses by less than c does

    def play(pairings):  # alphabetical order wins
        out = []
        for p in pairings:
            pa = 1.0 if p.a < p.b else 0.0
            sa = 1.0 if pa else loser_score[p.a]
            sb = loser_score[p.b] if pa else 1.0
            out.append(PairResult(pa, 1 - pa, sa, sb, 1))
        return out

    by_seed = drive(
        single_elimination(list(ratings), seeding="ratings", ratings=ratings), play
    )  # auto = seed
    by_score = drive(
        single_elimination(list(ratings), seeding="ratings", ratings=ratings, tiebreak="score"),
        play,
    )
    assert by_seed.order == ["a", "b", "c", "d"]
    assert by_score.order == ["a", "b", "d", "c"]
    with pytest.raises(ValueError, match="tiebreak"):
        next(single_elimination(["a", "b"], tiebreak="coin"))


def test_bad_options_are_one_line_errors():
    with pytest.raises(ValueError, match="at least 2 players"):
        next(single_elimination(["a"]))
    with pytest.raises(ValueError, match="duplicate"):
        next(single_elimination(["a", "a"]))
    with pytest.raises(ValueError, match="best_of"):
        next(single_elimination(["a", "b"], best_of=0))
    with pytest.raises(ValueError, match="unknown seeding"):
        next(double_elimination(["a", "b"], seeding="elo"))
