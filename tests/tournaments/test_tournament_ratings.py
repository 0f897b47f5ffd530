"""Ratings: Bradley-Terry MLE on the Elo scale with CIs that shrink with more games,
OpenSkill, alpha-rank and Nash averaging on non-transitive populations."""

import math

import numpy as np
import pytest

from tournaments.ratings import (
    ELO_SCALE,
    alpha_rank,
    bradley_terry,
    fit_bradley_terry,
    nash_average,
    openskill_ratings,
    win_rates,
)


def simulate(strengths, rounds, seed=0):
    """`rounds` games between every ordered pair, Bradley-Terry outcomes."""
    rng = np.random.default_rng(seed)
    games = []
    for _ in range(rounds):
        for a in strengths:
            for b in strengths:
                if a != b:
                    p = 1 / (1 + math.exp(strengths[b] - strengths[a]))
                    games.append((a, b, float(rng.random() < p)))
    return games


def test_two_players_hand_computed():
    # a wins 3 of 4: the MLE difference is ln 3, i.e. 400 log10(3) = 190.8 Elo
    games = [("a", "b", 1.0)] * 3 + [("a", "b", 0.0)]
    r = bradley_terry(games, reference="b", l2=1e-6)
    assert r["b"].elo == pytest.approx(1000.0)
    assert r["a"].elo - r["b"].elo == pytest.approx(400 * math.log10(3), abs=0.5)
    assert r["a"].games == r["b"].games == 4
    assert (
        r["b"].lo == r["b"].hi == pytest.approx(1000.0)
    )  # the reference is pinned: a point interval


def test_draws_count_half():
    # two draws and a win each way = 2 points each: equal ratings
    games = [("a", "b", 0.5), ("b", "a", 0.5), ("a", "b", 1.0), ("b", "a", 1.0)]
    r = bradley_terry(games)
    assert r["a"].elo == pytest.approx(1000.0, abs=1e-6) and r["b"].elo == pytest.approx(
        1000.0, abs=1e-6
    )
    # a draw is worth half a win: 1 win + 2 draws of 3 games = 2/3, i.e. ln 2 in theta
    r = bradley_terry([("a", "b", 1.0), ("a", "b", 0.5), ("a", "b", 0.5)], reference="b", l2=1e-6)
    assert r["a"].theta - r["b"].theta == pytest.approx(math.log(2), abs=1e-3)


def test_well_predicted_games_still_get_an_interval():
    # six draws between equals: every game is predicted exactly, so the sandwich's B is 0;
    # the interval is the model-based one, 1/(games * 1/4) for the difference
    r = bradley_terry([("a", "b", 0.5)] * 6, reference="b", l2=1e-6)
    half_width = 1.959964 * ELO_SCALE * math.sqrt(1 / (6 * 0.25))
    assert r["a"].elo == pytest.approx(1000.0, abs=1e-6)
    assert r["a"].hi - r["a"].elo == pytest.approx(half_width, rel=1e-3)
    assert r["b"].lo == r["b"].hi == pytest.approx(1000.0)
    # one draw against the reference, plus a game against a third player: B is small, not 0;
    # the interval is still at least the model-based one of a single game (+-679 Elo)
    r2 = bradley_terry([("y", "x", 0.5), ("x", "z", 1.0)], reference="x", l2=1e-6)
    assert r2["y"].hi - r2["y"].elo >= 1.959964 * ELO_SCALE * math.sqrt(1 / 0.25) * 0.99


def test_recovers_known_strengths():
    strengths = {"p0": 0.0, "p1": 0.7, "p2": 1.4, "p3": -1.0}
    r = bradley_terry(simulate(strengths, 150), reference="p0")
    for p, s in strengths.items():
        assert r[p].elo == pytest.approx(1000 + ELO_SCALE * s, abs=40)
        assert r[p].lo <= 1000 + ELO_SCALE * s <= r[p].hi
    assert sorted(strengths, key=lambda p: -r[p].elo) == ["p2", "p1", "p0", "p3"]


@pytest.mark.parametrize("ci", ["sandwich", "bootstrap"])
def test_confidence_intervals_shrink_with_more_games(ci):
    strengths = {"a": 0.0, "b": 0.5, "c": 1.0}
    widths = []
    for rounds in (10, 40, 160):
        r = bradley_terry(
            simulate(strengths, rounds, seed=rounds), reference="a", ci=ci, bootstrap=100
        )
        widths.append(np.mean([r[p].hi - r[p].lo for p in ("b", "c")]))
    assert widths[0] > widths[1] > widths[2]
    # 1/sqrt(games): four times the games, about half the width
    assert widths[1] / widths[0] == pytest.approx(0.5, abs=0.15)
    assert widths[2] / widths[1] == pytest.approx(0.5, abs=0.15)


def test_unplayed_player_and_validation():
    r = bradley_terry([("a", "b", 1.0)], players=["a", "b", "c"])
    assert r["c"].games == 0 and math.isnan(r["c"].lo)
    with pytest.raises(ValueError, match="not in the rated list"):
        bradley_terry([("a", "z", 1.0)], players=["a", "b"])
    with pytest.raises(ValueError, match="points must lie in"):
        bradley_terry([("a", "b", 2.0)])
    with pytest.raises(ValueError, match="reference player"):
        bradley_terry([("a", "b", 1.0)], reference="q")
    with pytest.raises(ValueError, match="ci must be"):
        bradley_terry([("a", "b", 1.0)], ci="jackknife")


def test_openskill_multiplayer_and_teams():
    matches = [{"a": 3, "b": 2, "c": 1}] * 5  # a always first of three
    r = openskill_ratings(matches)
    assert r["a"].mu > r["b"].mu > r["c"].mu
    assert r["a"].matches == 5 and r["a"].ordinal == pytest.approx(r["a"].mu - 3 * r["a"].sigma)
    teams = openskill_ratings([{("x", "y"): 1, ("z", "w"): 0}] * 3, model="BradleyTerryFull")
    assert teams["x"].mu > teams["z"].mu and teams["x"].mu == pytest.approx(teams["y"].mu)
    with pytest.raises(ValueError, match="unknown openskill model"):
        openskill_ratings(matches, model="Glicko")


ROCK_PAPER_SCISSORS = np.array([[0.5, 0.0, 1.0], [1.0, 0.5, 0.0], [0.0, 1.0, 0.5]])


def test_alpha_rank_cycle_and_dominance():
    np.testing.assert_allclose(alpha_rank(ROCK_PAPER_SCISSORS), [1 / 3] * 3, atol=1e-6)
    dominant = np.array([[0.5, 0.9, 0.9], [0.1, 0.5, 0.6], [0.1, 0.4, 0.5]])
    mass = alpha_rank(dominant)
    assert mass[0] > 0.99 and mass.sum() == pytest.approx(1.0)


def test_nash_average_cycle_and_dominance():
    mix, payoff = nash_average(ROCK_PAPER_SCISSORS)
    np.testing.assert_allclose(mix, [1 / 3] * 3, atol=1e-4)
    np.testing.assert_allclose(payoff, 0.0, atol=1e-4)  # nobody beats the mixture of the cycle
    # a dominated fourth player (loses to everyone) gets no Nash mass and a negative payoff
    P = np.full((4, 4), 0.5)
    P[:3, :3] = ROCK_PAPER_SCISSORS
    P[:3, 3], P[3, :3] = 0.8, 0.2
    mix, payoff = nash_average(P)
    assert mix[3] == pytest.approx(0.0, abs=1e-4) and payoff[3] < -0.5


def test_win_rates_matrix():
    P = win_rates([("a", "b", 1.0), ("a", "b", 0.5), ("b", "c", 0.0)], ["a", "b", "c"])
    assert P[0, 1] == 0.75 and P[1, 0] == 0.25 and P[2, 1] == 1.0
    assert P[0, 2] == 0.5 and P[1, 1] == 0.5  # unplayed and diagonal


def simulate_seats(strengths, rounds, seat, seed=0):
    """`rounds` games between every ordered pair (a first), P(a wins) = sigmoid(s_a - s_b + seat)."""
    rng = np.random.default_rng(seed)
    return [
        (a, b, float(rng.random() < 1 / (1 + math.exp(strengths[b] - strengths[a] - seat))))
        for _ in range(rounds)
        for a in strengths
        for b in strengths
        if a != b
    ]


@pytest.mark.parametrize("seat", [0.6, -0.4, 0.0])
def test_seat_advantage_is_recovered_and_ratings_corrected(seat):
    strengths = {"a": 0.0, "b": 0.5, "c": 1.0, "d": -0.5}
    fit = fit_bradley_terry(simulate_seats(strengths, 150, seat, seed=7), reference="a", seat=True)
    h = fit.seat["all"]
    assert h.games == 150 * 12 and h.lo < h.elo < h.hi
    assert h.lo <= ELO_SCALE * seat <= h.hi  # the known effect lies in its interval
    if seat:
        assert (h.lo > 0) == (seat > 0) and (h.hi < 0) == (seat < 0)  # and is told apart from none
    for p, s in strengths.items():
        assert fit.ratings[p].lo <= 1000 + ELO_SCALE * s <= fit.ratings[p].hi
    assert (
        bradley_terry(simulate_seats(strengths, 5, seat), seat=False)["a"].games == 30
    )  # the default fits no seat term
    assert fit_bradley_terry(simulate_seats(strengths, 5, seat)).seat == {}


def test_seat_term_is_separated_from_strength_when_seats_are_unbalanced():
    # the strong player always moves first: without a seat term its edge absorbs the seat's
    rng = np.random.default_rng(3)
    seat = 0.8
    games = [
        ("s", "w", float(rng.random() < 1 / (1 + math.exp(-(1.0 + seat))))) for _ in range(1500)
    ]
    games += [
        ("w", "s", float(rng.random() < 1 / (1 + math.exp(-(-1.0 + seat))))) for _ in range(500)
    ]
    with_seat = fit_bradley_terry(games, reference="w", seat=True)
    without = bradley_terry(games, reference="w")
    true = 1000 + ELO_SCALE * 1.0
    assert with_seat.ratings["s"].lo <= true <= with_seat.ratings["s"].hi
    assert without["s"].lo > true  # biased by the seat it mostly played from


def test_rank_intervals_single_for_a_clear_field_shared_for_equals():
    clear = bradley_terry(simulate({"a": 3.0, "b": 1.5, "c": 0.0, "d": -1.5}, 60, seed=1))
    assert sorted((r.rank_lo, r.rank_hi) for r in clear.values()) == [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 4),
    ]
    assert [clear[p].rank_lo for p in "abcd"] == [1, 2, 3, 4]
    equals = bradley_terry(
        simulate({"a": 2.0, "b": 2.0, "c": 0.0, "d": -2.0}, 40, seed=2), reference="c"
    )
    assert (equals["a"].rank_lo, equals["a"].rank_hi) == (1, 2) and (
        equals["b"].rank_lo,
        equals["b"].rank_hi,
    ) == (1, 2)
    assert (equals["c"].rank_lo, equals["c"].rank_hi) == (3, 3) and (
        equals["d"].rank_lo,
        equals["d"].rank_hi,
    ) == (4, 4)
    # few games: nobody can be told apart
    few = bradley_terry(simulate({"a": 0.3, "b": 0.0, "c": -0.3}, 1, seed=3))
    assert all((r.rank_lo, r.rank_hi) == (1, 3) for r in few.values())


def test_undefeated_player_interval_starts_above_the_field():
    # hand-computed: a beat the reference b 5 times; the profile likelihood's lower end solves
    # 2 * 5 * log(1 + e^-d) = chi2_1(0.95), and there is no upper end
    r = bradley_terry([("a", "b", 1.0)] * 5, reference="b", l2=1e-6)
    d = -math.log(math.exp(3.841459 / 10) - 1)
    assert r["a"].lo == pytest.approx(1000 + ELO_SCALE * d, abs=0.5) and r["a"].hi == math.inf
    assert r["b"].lo == r["b"].hi == 1000
    # a round robin whose player "top" won all its games: the field's mean is 1000 and top's interval stays above it
    strengths = {"b": 0.2, "c": 0.0, "d": -0.2}
    games = (
        simulate(strengths, 3, seed=5)
        + [("top", p, 1.0) for p in strengths] * 2
        + [(p, "top", 0.0) for p in strengths] * 2
    )
    for ci in ("sandwich", "bootstrap"):
        r = bradley_terry(games, ci=ci, bootstrap=50)
        assert r["top"].lo > 1000 and r["top"].hi == math.inf and r["top"].elo > r["top"].lo
        assert np.mean([r[p].elo for p in strengths]) == pytest.approx(1000)
        assert all(math.isfinite(r[p].lo) and math.isfinite(r[p].hi) for p in strengths)
        assert r["top"].rank_lo == 1
    # and the mirror image: a player that lost every game has no lower end and stays below
    flipped = bradley_terry([(a, b, 1 - s) for a, b, s in games])
    assert flipped["top"].hi < 1000 and flipped["top"].lo == -math.inf


def test_one_seat_term_per_game():
    # first move worth +0.8 in "go_first", -0.5 in "go_second": one term per game recovers both
    strengths = {"a": 0.5, "b": 0.0, "c": -0.5}
    first, second = (
        simulate_seats(strengths, 200, 0.8, seed=1),
        simulate_seats(strengths, 200, -0.5, seed=2),
    )
    fit = fit_bradley_terry(
        first + second, seat=["go_first"] * len(first) + ["go_second"] * len(second)
    )
    assert list(fit.seat) == ["go_first", "go_second"] and fit.seat["go_first"].games == len(first)
    for label, h in (("go_first", 0.8), ("go_second", -0.5)):
        assert fit.seat[label].lo <= ELO_SCALE * h <= fit.seat[label].hi
    assert fit.seat["go_first"].lo > 0 > fit.seat["go_second"].hi
    pooled = fit_bradley_terry(first + second, seat=True).seat["all"]
    assert fit.seat["go_second"].hi < pooled.elo < fit.seat["go_first"].lo
    with pytest.raises(ValueError, match="one per game"):
        fit_bradley_terry(first, seat=["x"])


def test_rank_ranges_can_be_skipped():
    games = simulate({"a": 1.0, "b": 0.0, "c": -1.0}, 5)
    full, quick = fit_bradley_terry(games), fit_bradley_terry(games, ranks=False)
    assert all(r.rank_lo == r.rank_hi == 0 for r in quick.ratings.values())
    assert all(
        full.ratings[p].rank_lo >= 1 and full.ratings[p].lo == quick.ratings[p].lo
        for p in full.ratings
    )


def test_no_field_falls_back_to_the_mean():
    # a single game: no group of players took points from each other; the mean is 1000 and
    # each side is unbounded the way its record points
    r = bradley_terry([("a", "b", 1.0)])
    assert r["a"].elo + r["b"].elo == pytest.approx(2000)
    assert (
        r["a"].hi == math.inf
        and math.isfinite(r["a"].lo)
        and r["b"].lo == -math.inf
        and math.isfinite(r["b"].hi)
    )
    # two separate pairs that split their games: two fields of the same size, neither pinned alone
    r = bradley_terry([("a", "b", 1.0), ("b", "a", 1.0), ("c", "d", 1.0), ("d", "c", 1.0)])
    assert np.mean([x.elo for x in r.values()]) == pytest.approx(1000)
    assert all(x.lo == -math.inf and x.hi == math.inf for x in r.values())
