"""Round robin, Swiss, anchor: match counts, seats, no rematches, byes, Buchholz, and
recovering a known order of simulated Bradley-Terry players."""

import math
from itertools import combinations

import numpy as np
import pytest
from scipy.stats import kendalltau

from tournaments.config import load_config
from tournaments.formats import format_options, make_format, round_robin, swiss
from tournaments.judge import judge_group
from tournaments.rounds import Pairing, PairResult, drive
from tournaments.run import match_specs
from tournaments.seeding import anchor


def coin_flips(seed):
    rng = np.random.default_rng(seed)

    def play(pairings):
        out = []
        for p in pairings:
            pa = (
                float(rng.integers(0, 2 * p.games + 1)) / 2
            )  # any split of the games, draws included
            out.append(PairResult(pa, p.games - pa, pa, p.games - pa, p.games))
        return out

    return play


def bt_judge(strengths, seed):
    """Bradley-Terry as random utility: performance = strength + Gumbel; the higher wins."""
    rng = np.random.default_rng(seed)
    return lambda pairs: [
        (strengths[a] + rng.gumbel(), strengths[b] + rng.gumbel()) for a, b in pairs
    ]


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_round_robin_every_pair_k_games_one_round(n):
    outcome = drive(round_robin(list(range(n)), games=3), coin_flips(n))
    assert len(outcome.rounds) == 1
    pairs = [frozenset((p.a, p.b)) for p, _ in outcome.rounds[0]]
    assert sorted(pairs, key=sorted) == sorted(
        (frozenset(c) for c in combinations(range(n), 2)), key=sorted
    )
    assert all(p.games == 3 for p, _ in outcome.rounds[0])
    assert all(s["games"] == 3 * (n - 1) for s in outcome.stats.values())


def test_round_robin_seats_alternate():
    cfg = load_config(
        {
            "name": "t",
            "format": "round_robin",
            "players": {"a": "random", "b": "random"},
            "games": ["tic_tac_toe", "kuhn_poker"],
            "games_per_pairing": 2,
        }
    )
    specs = match_specs(cfg, Pairing("a", "b", "RR", 2), 0)
    assert len(specs) == 4
    for game in ("tic_tac_toe", "kuhn_poker"):
        seats = [s.seats for s in specs if s.game == game]
        assert sorted(seats) == [["a", "b"], ["b", "a"]]  # each player moves first once per game
    assert len({s.match_id for s in specs}) == 4 and len({s.seed for s in specs}) == 4


def test_round_robin_points_hand_computed():
    # a beats b and c, b and c draw: a 2, b 0.5, c 0.5 (b ahead of c on mean score)
    results = {
        frozenset("ab"): ("a", 1.0),
        frozenset("ac"): ("a", 1.0),
        frozenset("bc"): ("b", 0.5),
    }

    def play(pairings):
        out = []
        for p in pairings:
            who, pts = results[frozenset((p.a, p.b))]
            pa = pts if p.a == who else 1 - pts
            out.append(
                PairResult(
                    pa,
                    1 - pa,
                    pa + (0.1 if p.a == "b" else 0),
                    1 - pa + (0.1 if p.b == "b" else 0),
                    1,
                )
            )
        return out

    outcome = drive(round_robin(["a", "b", "c"]), play)
    assert outcome.order == ["a", "b", "c"]
    assert [outcome.stats[p]["points"] for p in "abc"] == [2.0, 0.5, 0.5]


@pytest.mark.parametrize("n", range(2, 34))
def test_swiss_rounds_no_rematches_and_byes(n):
    outcome = drive(swiss(list(range(n)), seed=n), coin_flips(n))
    rounds = max(1, math.ceil(math.log2(n)))
    assert len(outcome.rounds) == rounds
    seen = set()
    for rnd in outcome.rounds:
        in_round = [x for p, _ in rnd for x in (p.a, p.b)]
        assert (
            len(in_round) == len(set(in_round)) == n - n % 2
        )  # everyone plays once, one bye if odd
        for p, _ in rnd:
            pair = frozenset((p.a, p.b))
            assert pair not in seen, f"rematch {sorted(pair)}"
            seen.add(pair)
    byes = {p: s["byes"] for p, s in outcome.stats.items()}
    assert sum(byes.values()) == (rounds if n % 2 else 0)
    assert (
        max(byes.values()) <= 1 or rounds > (n + 1) // 2
    )  # nobody gets two byes while others have none
    assert len(outcome.order) == n


def test_swiss_buchholz_hand_computed():
    """4 players, 2 rounds, the lower index always wins.
    Round 1 (Dutch, order seeding): 0-2, 1-3.  Round 2: 0-1, 2-3.
    Points: 0:2, 1:1, 2:1, 3:0.  Buchholz: 0: 1+1=2, 1: 0+2=2, 2: 2+0=2, 3: 1+1=2."""

    def lower_wins(pairings):
        return [PairResult(float(p.a < p.b), float(p.a > p.b), 0, 0, 1) for p in pairings]

    outcome = drive(swiss([0, 1, 2, 3], seeding="order"), lower_wins)
    r1 = {frozenset((p.a, p.b)) for p, _ in outcome.rounds[0]}
    r2 = {frozenset((p.a, p.b)) for p, _ in outcome.rounds[1]}
    assert r1 == {frozenset((0, 2)), frozenset((1, 3))}
    assert r2 == {frozenset((0, 1)), frozenset((2, 3))}
    assert [outcome.stats[p]["points"] for p in range(4)] == [2, 1, 1, 0]
    assert [outcome.stats[p]["buchholz"] for p in range(4)] == [2, 2, 2, 2]
    assert outcome.order == [0, 1, 2, 3]


def test_swiss_seeding_phase_earns_no_points():
    # the anchor (0) wins every seeding game; Swiss points count only the 2 Swiss rounds
    def lower_wins(pairings):
        return [PairResult(float(p.a < p.b), float(p.a > p.b), 0, 0, 1) for p in pairings]

    outcome = drive(swiss([3, 1, 0, 2], seeding="anchor", anchor=0), lower_wins)
    assert [p.label for p, _ in outcome.rounds[0]] == ["A"] * 3 and len(outcome.rounds) == 3
    assert sum(outcome.stats[p]["points"] for p in range(4)) == 4  # 2 rounds x 2 pairings
    assert max(outcome.stats[p]["games"] for p in range(4)) == 2
    assert outcome.order == [0, 1, 2, 3]


def test_swiss_buchholz_breaks_a_points_tie():
    """5 players, 3 rounds, lower index wins; a bye is a won pairing. The players level on
    points are ordered by the points of the opponents they met."""

    def lower_wins(pairings):
        return [PairResult(float(p.a < p.b), float(p.a > p.b), 0, 0, 1) for p in pairings]

    outcome = drive(swiss(list(range(5)), seeding="order"), lower_wins)
    st = outcome.stats
    for p in range(5):  # Buchholz is the sum of the opponents' final points (byes included)
        opponents = [
            q
            for rnd in outcome.rounds
            for pr, _ in rnd
            for q in (pr.a, pr.b)
            if p in (pr.a, pr.b) and q != p
        ]
        assert st[p]["buchholz"] == sum(st[q]["points"] for q in opponents)
    ties = [(p, q) for p, q in combinations(outcome.order, 2) if st[p]["points"] == st[q]["points"]]
    assert all(st[p]["buchholz"] >= st[q]["buchholz"] for p, q in ties)


def test_anchor_format():
    outcome = drive(anchor(list("abcd"), anchor="c", games=2), coin_flips(0))
    (rnd,) = outcome.rounds
    assert len(rnd) == 3 and all(p.b == "c" and p.games == 2 for p, _ in rnd)
    with pytest.raises(ValueError, match="not one of the players"):
        next(anchor(list("ab"), anchor="z"))


FORMAT_COSTS = {
    # name, options, comparisons used for N = 12
    "round_robin": ({}, 66),
    "swiss": ({}, 24),
    "single_elimination": ({"seeding": "anchor"}, 22),
    "double_elimination": ({"seeding": "anchor"}, None),
    "anchor": ({}, 11),
}


@pytest.mark.parametrize("fmt", list(FORMAT_COSTS))
def test_ranking_recovers_a_known_order(fmt):
    """Simulated Bradley-Terry players with well-separated strengths: every format ranks
    them close to the truth (Kendall tau), with its known number of comparisons."""
    n = 12
    strengths = np.linspace(6.0, -6.0, n)  # player i is the i-th best; neighbours 1.1 logits apart
    opts, cost = FORMAT_COSTS[fmt]
    taus = []
    for seed in range(5):
        used = []
        judge = bt_judge(strengths, seed)
        outcome = judge_group(
            n, lambda pairs: (used.append(len(pairs)), judge(pairs))[1], fmt, **opts
        )
        ranks = outcome.ranks()
        taus.append(kendalltau(range(n), [ranks[i] for i in range(n)]).statistic)
        if cost is not None:
            assert sum(used) == cost
        else:
            assert sum(used) in (11 + 22, 11 + 23)
    assert np.mean(taus) > 0.8, taus


def test_make_format_rejects_unknown_options():
    assert "best_of" in format_options("single_elimination")
    with pytest.raises(ValueError, match="unknown option 'best_of' for format round_robin"):
        make_format("round_robin", ["a", "b"], best_of=3)
    with pytest.raises(ValueError, match="unknown format"):
        make_format("ladder", ["a", "b"])


def test_result_count_mismatch_is_caught():
    gen = round_robin(["a", "b", "c"])
    next(gen)
    with pytest.raises(ValueError, match="3 pairings got 1 results"):
        gen.send([PairResult(1, 0, 0, 0, 1)])
