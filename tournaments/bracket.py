"""Elimination brackets: seeded single elimination (ArenaRL) and double elimination.

`seeded_bracket(n)` lays seeds into 2^ceil(log2 n) slots in the standard order: slot i of
a bracket of c pairs meets slot 2c-1-i, applied recursively, so seed 1 can meet seed 2
only in the final, seeds 1-4 only in the semifinals, and the byes (slots past n) go to
the top seeds:

    seeded_bracket(8) == [0, 7, 3, 4, 1, 6, 2, 5]      # 1v8, 4v5, 2v7, 3v6
    seeded_bracket(5) == [0, None, 3, 4, 1, None, 2, None]

A bracket is a list of `BracketMatch`es whose two entrants come from a slot, the winner
of an earlier match or its loser. Every step plays all matches whose entrants are known
(winners' and losers' bracket rounds together); a missing entrant (a bye) sends the other
through without a game. A series is best-of-k, played in waves: each wave plays the
fewest games that could decide it, so a 2-0 in a best-of-3 stops there. A series still
level after k games goes to the higher total score, then to the higher seed.

Final ranking: the champion, then by the round a player was knocked out in (later is
better); players out in the same round by `tiebreak`:

    "score"  the mean score of all their games, seeding phase included, then seed (ArenaRL)
    "seed"   the seed alone: right when the seeds come from prior ratings built on many
             games, which one or two bracket games' scores would only add noise to
    "auto"   (default) "seed" when seeding == "ratings", else "score"

(`bench/tournament_efficiency.py` measures both.) Single elimination plays N-1 pairings;
double elimination 2N-2, or 2N-1 when the losers'-bracket champion wins the grand final
and the final is replayed (`grand_final_reset`). A seeding phase against an anchor adds
N-1. Bracket rounds are not format rounds: every match whose entrants are known is
played at once, so a match between two players who had byes joins the first round.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tournaments.rounds import (
    FormatGen,
    Outcome,
    Pairing,
    PairResult,
    Player,
    Tally,
    check_count,
    check_players,
    run_round,
    sort_players,
)
from tournaments.seeding import seed_order

CHAMPION = 10_000  # exit stage of the champion; the runner-up of the last final gets CHAMPION - 1


def seeded_bracket(n: int) -> list[int | None]:
    """Seed index (0 = top seed) in each slot of a 2^ceil(log2 n) bracket; None = bye.

    Slots 2j and 2j+1 meet in the first round; the standard order puts slot i against slot
    2c-1-i recursively, so the top seeds meet as late as possible.
    """
    if n < 1:
        raise ValueError(f"a bracket needs at least one player, got {n}")
    size = 1 << max(0, math.ceil(math.log2(n)))
    order, c = [0], 1
    while c < size:
        order = [x for s in order for x in (s, 2 * c - 1 - s)]
        c *= 2
    return [s if s < n else None for s in order]


@dataclass
class BracketMatch:
    """One node of a bracket."""

    id: str  # unique: "W1-0", "L3-1", "GF", "GF2"
    side: str  # "W" winners' bracket, "L" losers' bracket, "F" grand final
    round: int  # round number within its side
    label: str  # round label: "W1", "L3", "GF", "GF2"
    a_src: tuple  # ("slot", i) | ("win", match id) | ("lose", match id)
    b_src: tuple
    a: Any = None  # entrants once known (None = bye)
    b: Any = None
    winner: Any = None
    loser: Any = None
    result: PairResult | None = None  # the series; None when decided without a game
    done: bool = False


def single_elimination_matches(size: int) -> list[BracketMatch]:
    """The winners'-bracket nodes of a `size`-slot bracket (size a power of two)."""
    matches, rounds = [], int(math.log2(size))
    for r in range(1, rounds + 1):
        for i in range(size >> r):
            if r == 1:
                srcs = ("slot", 2 * i), ("slot", 2 * i + 1)
            else:
                srcs = ("win", f"W{r - 1}-{2 * i}"), ("win", f"W{r - 1}-{2 * i + 1}")
            matches.append(BracketMatch(f"W{r}-{i}", "W", r, f"W{r}", *srcs))
    return matches


def double_elimination_matches(size: int, grand_final_reset: bool = True) -> list[BracketMatch]:
    """Winners' bracket, losers' bracket and grand final of a `size`-slot bracket.

    Losers' round 1 pairs the first-round losers; then rounds alternate between taking in
    the losers of the next winners' round (in reversed order, to postpone rematches) and
    halving the field, until one player meets the winners'-bracket loser of the final.
    """
    matches = single_elimination_matches(size)
    m = int(math.log2(size))
    if m == 1:
        lb_champion = ("lose", "W1-0")
    else:
        for i in range(size >> 2):
            matches.append(
                BracketMatch(
                    f"L1-{i}", "L", 1, "L1", ("lose", f"W1-{2 * i}"), ("lose", f"W1-{2 * i + 1}")
                )
            )
        prev = 1
        for k in range(2, m + 1):
            count = size >> k
            j = 2 * k - 2  # drop-in round: survivors vs losers of winners' round k
            for i in range(count):
                matches.append(
                    BracketMatch(
                        f"L{j}-{i}",
                        "L",
                        j,
                        f"L{j}",
                        ("win", f"L{prev}-{i}"),
                        ("lose", f"W{k}-{count - 1 - i}"),
                    )
                )
            prev = j
            if k < m:  # halving round
                j += 1
                for i in range(count // 2):
                    matches.append(
                        BracketMatch(
                            f"L{j}-{i}",
                            "L",
                            j,
                            f"L{j}",
                            ("win", f"L{prev}-{2 * i}"),
                            ("win", f"L{prev}-{2 * i + 1}"),
                        )
                    )
                prev = j
        lb_champion = ("win", f"L{prev}-0")
    matches.append(BracketMatch("GF", "F", 1, "GF", ("win", f"W{m}-0"), lb_champion))
    if grand_final_reset:
        matches.append(BracketMatch("GF2", "F", 2, "GF2", ("win", "GF"), ("lose", "GF")))
    return matches


def single_elimination(
    players: Sequence[Player],
    best_of: int = 1,
    seeding: str = "order",
    ratings: dict | None = None,
    anchor: Player | None = None,
    seed_games: int = 1,
    seed: int = 0,
    tiebreak: str = "auto",
) -> FormatGen:
    """Seeded single elimination (ArenaRL): N-1 best-of-`best_of` series, plus seeding.

    Args:
      best_of: games per series; a series level after them goes to the higher total score,
        then to the higher seed.
      seeding: "order" (as listed), "ratings", "random" or "anchor" (`tournaments.seeding`).
      ratings: {player: rating} for seeding "ratings", or (in a tournament config) the path
        of an earlier tournament's DB whose ratings are read once.
      anchor: the reference player of seeding "anchor", which first plays everyone against
        it (default: the first player).
      seed_games: games each player plays against the anchor when seeding "anchor".
      seed: the random order of seeding "random".
      tiebreak: orders the players out in the same round: "score" (mean score, then seed),
        "seed", or "auto" ("seed" when seeding is "ratings", else "score").
    """
    return (
        yield from _elimination(
            players, best_of, seeding, ratings, anchor, seed_games, seed, tiebreak, double=False
        )
    )


def double_elimination(
    players: Sequence[Player],
    best_of: int = 1,
    seeding: str = "order",
    ratings: dict | None = None,
    anchor: Player | None = None,
    seed_games: int = 1,
    seed: int = 0,
    tiebreak: str = "auto",
    grand_final_reset: bool = True,
) -> FormatGen:
    """Double elimination: out after two lost series; ~2N-2 series.

    Args:
      best_of: games per series.
      seeding: as `single_elimination`.
      ratings: as `single_elimination`.
      anchor: as `single_elimination`.
      seed_games: as `single_elimination`.
      seed: as `single_elimination`.
      tiebreak: as `single_elimination`.
      grand_final_reset: replay the final when the losers'-bracket player wins it.
    """
    return (
        yield from _elimination(
            players,
            best_of,
            seeding,
            ratings,
            anchor,
            seed_games,
            seed,
            tiebreak,
            double=True,
            reset=grand_final_reset,
        )
    )


TIEBREAKS = ("auto", "score", "seed")


def _elimination(
    players, best_of, seeding, ratings, anchor, seed_games, seed, tiebreak, double, reset=True
) -> FormatGen:
    players = check_players(players)
    if tiebreak not in TIEBREAKS:
        raise ValueError(f"unknown tiebreak {tiebreak!r} (choose from {', '.join(TIEBREAKS)})")
    if tiebreak == "auto":
        tiebreak = "seed" if seeding == "ratings" else "score"
    check_count(best_of, "best_of")
    check_count(seed_games, "seed_games")
    tally = Tally(players)
    order = yield from seed_order(players, tally, seeding, ratings, anchor, seed_games, seed)
    slots = [order[s] if s is not None else None for s in seeded_bracket(len(order))]
    size = len(slots)
    matches = (
        double_elimination_matches(size, reset) if double else single_elimination_matches(size)
    )
    seed_rank = {p: i for i, p in enumerate(order)}
    yield from _run_bracket(tally, matches, slots, best_of, seed_rank)

    exit_stage, exit_label = {}, {}
    for m in matches:  # a player's last loss is where it went out
        if m.result is not None and m.loser is not None and (not double or m.side != "W"):
            exit_stage[m.loser] = m.round if m.side != "F" else CHAMPION - 1
            exit_label[m.loser] = m.label
    final = [m for m in matches if m.result is not None and (m.side == "F" or not double)][-1]
    exit_stage[final.winner], exit_label[final.winner] = CHAMPION, "champion"
    if double:  # whoever lost only in the grand final is second
        exit_stage[final.loser] = CHAMPION - 1
    if tiebreak == "seed":
        ranked = sort_players(order, lambda p: exit_stage[p])
    else:
        ranked = sort_players(order, lambda p: (exit_stage[p], tally.mean_score(p)))
    stats = tally.stats(seed={p: i + 1 for p, i in seed_rank.items()}, eliminated=exit_label)
    return Outcome(ranked, stats, tally.rounds, matches)


def _run_bracket(
    tally: Tally, matches: list[BracketMatch], slots: list, best_of: int, seed_rank: dict
) -> FormatGen:
    by_id = {m.id: m for m in matches}

    def entrant(src):
        kind, x = src
        if kind == "slot":
            return True, slots[x]
        m = by_id[x]
        return m.done, (m.winner if kind == "win" else m.loser) if m.done else None

    while not all(m.done for m in matches):
        changed = True
        while changed:  # settle byes (and an unneeded reset final) until nothing moves
            changed = False
            for m in matches:
                if m.done:
                    continue
                (ka, a), (kb, b) = entrant(m.a_src), entrant(m.b_src)
                if not (ka and kb):
                    continue
                m.a, m.b = a, b
                gf = by_id.get("GF")
                if m.id == "GF2" and gf.winner == gf.a:  # winners'-bracket champion won: no reset
                    m.a = m.b = None
                    m.winner, m.done, changed = None, True, True
                elif a is None or b is None:
                    m.winner, m.loser, m.done, changed = (
                        (a if a is not None else b),
                        None,
                        True,
                        True,
                    )
        ready = [m for m in matches if not m.done and entrant(m.a_src)[0] and entrant(m.b_src)[0]]
        if not ready and all(m.done for m in matches):
            break
        if not ready:
            raise RuntimeError("bracket is stuck: no match is ready (a bug in the bracket layout)")
        decided = yield from series(tally, [(m.a, m.b, m.label) for m in ready], best_of, seed_rank)
        for m, (winner, loser, result) in zip(ready, decided):
            m.winner, m.loser, m.result, m.done = winner, loser, result, True


def series(
    tally: Tally, pairs: list[tuple], best_of: int, seed_rank: dict | None = None
) -> FormatGen:
    """Play best-of-`best_of` series for all `pairs` (a, b, label) at once, in waves.

    A series level after `best_of` games goes to the higher total score, then to the
    higher seed (lower `seed_rank`; without one, to a).

    Returns [(winner, loser, summed PairResult)] in the order of `pairs`.
    """
    totals = [PairResult(0.0, 0.0, 0.0, 0.0, 0) for _ in pairs]
    decided: list = [None] * len(pairs)
    half = best_of / 2
    while None in decided:
        idx = [i for i, d in enumerate(decided) if d is None]
        wave = []
        for i in idx:
            t, (a, b, label) = totals[i], pairs[i]
            lead = max(t.points_a, t.points_b)
            n = min(best_of - t.games, math.floor(half - lead + 1e-9) + 1)
            wave.append(Pairing(a, b, label, max(1, n), t.games))
        results = yield from run_round(tally, wave)
        for i, r in zip(idx, results):
            t, (a, b, _) = totals[i], pairs[i]
            t.points_a += r.points_a
            t.points_b += r.points_b
            t.score_a += r.score_a
            t.score_b += r.score_b
            t.games += r.games
            if t.points_a > half + 1e-9:
                decided[i] = (a, b, t)
            elif t.points_b > half + 1e-9:
                decided[i] = (b, a, t)
            elif t.games >= best_of:  # level: total score, then seed
                rank = seed_rank or {}
                b_first = (t.score_b, -rank.get(b, 0)) > (t.score_a, -rank.get(a, 0))
                decided[i] = (b, a, t) if b_first else (a, b, t)
    return decided
