"""The round protocol every tournament format speaks, over opaque players.

A format is a generator. It yields a *round*: a list of `Pairing`s that can all be played
at once (the arena plays a whole round as one batch, an LLM judge scores it in one backend
call). It is sent back one `PairResult` per pairing, in the same order, and finally
returns an `Outcome` with a strict ranking:

    gen = single_elimination(["a", "b", "c"], best_of=3)
    round_ = next(gen)                    # list[Pairing]
    round_ = gen.send(results)            # list[PairResult] for the previous round
    ...                                   # StopIteration.value is the Outcome

`drive(gen, play_round)` runs that loop. A format draws nothing at random except from
its own `seed`, so given the same results it yields the same rounds: resuming a
tournament is replaying it with the results already stored.

Players are any hashable values (agent names in the arena, indices of trajectories for a
judge). A *game* is one comparison of two players: a match in the arena, a judge call in
training. Its points are 1 / 0.5 / 0 (win, draw, loss), and its *score* is the raw number
behind it (a return, a judge score), used to break ties.

Games of N seats speak the same protocol with a `Table` of N players for a `Pairing` and a
`TableResult` (each game's `Finish`: a finishing order) for a `PairResult`
(`tournaments.tables`). A player's points in one such game are the share of the other sides
it finished above, a tie counting half: with two seats, win 1, draw 1/2, loss 0 again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Generator, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

Player = Hashable


@dataclass(frozen=True)
class Pairing:
    """Two players to compare `games` times now (all concurrently)."""

    a: Player  # first listed: the higher seed; wins an unbreakable tie; seat 0 in even games
    b: Player
    label: str  # round label, unique within a round: "RR", "A", "S2", "W1", "L3", "GF"
    games: int = 1  # games to play in this round
    first_game: int = 0  # index of the first of them within the pairing's series


@dataclass
class PairResult:
    """What `games` games of a pairing produced, summed."""

    points_a: float  # win 1, draw 0.5, loss 0 per game; points_a + points_b == games
    points_b: float
    score_a: float = 0.0  # sum of raw scores (returns, judge scores): tie-breaks
    score_b: float = 0.0
    games: int = 1

    @classmethod
    def from_scores(cls, scores: Iterable[tuple[float, float]]) -> PairResult:
        """One game per (score_a, score_b): the higher score wins, equal scores draw."""
        r = cls(0.0, 0.0, 0.0, 0.0, 0)
        for sa, sb in scores:
            pa = 1.0 if sa > sb else 0.5 if sa == sb else 0.0
            r.points_a += pa
            r.points_b += 1.0 - pa
            r.score_a += sa
            r.score_b += sb
            r.games += 1
        return r


@dataclass
class Outcome:
    """A finished format: the ranking and how it came about."""

    order: list  # players, best first (strict: every tie broken)
    stats: dict  # player -> {"points", "games", "mean_points", "mean_score", + format specifics}
    rounds: list = field(default_factory=list)  # per round: list of (Pairing, PairResult)
    bracket: list | None = None  # elimination formats: the BracketMatch list, resolved

    def ranks(self) -> dict:
        """Player -> 0-based position in `order` (0 = winner)."""
        return {p: i for i, p in enumerate(self.order)}


@dataclass(frozen=True)
class Table:
    """N players (N = the game's seats) to compare `games` times now, seats rotating: game g
    seats the players rotated by g (`tournaments.run.match_specs`)."""

    players: tuple  # seat order of the table's game 0
    label: str  # round label, unique within a round: "RR", "S2", "A3"
    games: int = 1  # games to play in this round
    first_game: int = 0  # index of the first of them within the table's series


@dataclass(frozen=True)
class Finish:
    """One game of N seats as a finishing order: who sat where and what each seat scored.

    A side is a seat, or a team (`teams`: groups of seat indices that share a result): a
    team's result is the sum of its members' scores, and its members share its place and
    points. Sides with equal results tie."""

    seats: tuple  # players in seat order
    scores: tuple  # each seat's score (its return)
    teams: tuple = ()  # tuples of seat indices; () = every seat a side of its own
    label: str = ""  # the group of its seat terms in a rating fit (the game's name)

    def sides(self) -> list[tuple[int, ...]]:
        """The competing sides, as tuples of seat indices."""
        return [tuple(t) for t in self.teams] or [(s,) for s in range(len(self.seats))]

    def side_results(self) -> list[float]:
        return [sum(self.scores[s] for s in side) for side in self.sides()]

    def points(self) -> list[float]:
        """Each seat's points: the share of the other sides it finished above, a tie half."""
        sides, results = self.sides(), self.side_results()
        out = [0.0] * len(self.seats)
        for side, r in zip(sides, results):
            above = sum(o < r for o in results)
            tied = sum(o == r for o in results) - 1
            for s in side:
                out[s] = (above + tied / 2) / (len(sides) - 1)
        return out

    def places(self) -> list[int]:
        """Each seat's place, 1 = first; tied sides share the better place (1, 2, 2, 4)."""
        sides, results = self.sides(), self.side_results()
        out = [0] * len(self.seats)
        for side, r in zip(sides, results):
            for s in side:
                out[s] = 1 + sum(o > r for o in results)
        return out


@dataclass
class TableResult:
    """What the games of a table produced: one `Finish` each."""

    finishes: list[Finish]

    @property
    def games(self) -> int:
        return len(self.finishes)

    def points(self, player: Player) -> float:
        """The player's points summed over the games."""
        return sum(f.points()[f.seats.index(player)] for f in self.finishes)

    def score(self, player: Player) -> float:
        """The player's scores (returns) summed over the games."""
        return sum(f.scores[f.seats.index(player)] for f in self.finishes)


FormatGen = Generator[list[Pairing], list[PairResult], Outcome]


def drive(gen: FormatGen, play_round: Callable[[list[Pairing]], Sequence[PairResult]]) -> Outcome:
    """Run a format to the end, calling `play_round(pairings) -> results` once per round."""
    try:
        pairings = next(gen)
        while True:
            pairings = gen.send(list(play_round(pairings)))
    except StopIteration as stop:
        return stop.value


class Tally:
    """Running per-player totals shared by the formats."""

    def __init__(self, players: Sequence[Player]):
        self.players = list(players)
        self.points: dict = defaultdict(float)
        self.score: dict = defaultdict(float)
        self.games: dict = defaultdict(int)
        self.opponents: dict = defaultdict(list)
        self.rounds: list = []

    def add(self, p: Pairing, r: PairResult) -> None:
        self.points[p.a] += r.points_a
        self.points[p.b] += r.points_b
        self.score[p.a] += r.score_a
        self.score[p.b] += r.score_b
        self.games[p.a] += r.games
        self.games[p.b] += r.games
        self.opponents[p.a].append(p.b)
        self.opponents[p.b].append(p.a)

    def mean_points(self, p: Player) -> float:
        return self.points[p] / self.games[p] if self.games[p] else 0.0

    def mean_score(self, p: Player) -> float:
        return self.score[p] / self.games[p] if self.games[p] else 0.0

    def stats(self, **extra: dict) -> dict:
        """Per-player stats; `extra` maps a stat name to a {player: value} dict."""
        out = {}
        for p in self.players:
            s = {
                "points": self.points[p],
                "games": self.games[p],
                "mean_points": self.mean_points(p),
                "mean_score": self.mean_score(p),
            }
            for name, values in extra.items():
                if p in values:
                    s[name] = values[p]
            out[p] = s
        return out


def run_round(
    tally: Tally, pairings: list[Pairing]
) -> Generator[list[Pairing], list[PairResult], list[PairResult]]:
    """Yield one round, check and record its results, return them (use with `yield from`)."""
    if not pairings:
        return []
    results = yield pairings
    if results is None or len(results) != len(pairings):
        got = "none" if results is None else len(results)
        raise ValueError(f"round of {len(pairings)} pairings got {got} results")
    for p, r in zip(pairings, results):
        if abs(r.points_a + r.points_b - r.games) > 1e-9 or r.games != p.games:
            raise ValueError(
                f"result for {p.a!r} vs {p.b!r} ({p.label}) has {r.games} games and "
                f"{r.points_a}+{r.points_b} points; expected {p.games} games and points summing to it"
            )
        tally.add(p, r)
    tally.rounds.append(list(zip(pairings, results)))
    return list(results)


def check_players(players: Sequence[Player], minimum: int = 2) -> list:
    players = list(players)
    if len(players) < minimum:
        raise ValueError(f"need at least {minimum} players, got {len(players)}")
    if len(set(players)) != len(players):
        dupes = sorted({repr(p) for p in players if players.count(p) > 1})
        raise ValueError(f"duplicate players: {', '.join(dupes)}")
    return players


def check_count(n: int, name: str) -> None:
    """A format's count option (`games`, `best_of`, `seed_games`) must be a positive integer.

    Raises:
        ValueError: naming the option and the value it got.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"{name} must be a positive integer, got {n!r}")


def sort_players(players: Sequence[Player], key: Callable[[Player], Any]) -> list:
    """Players by descending `key` (a tuple); equal keys keep their given order."""
    return [p for _, p in sorted(enumerate(players), key=lambda ip: (_neg(key(ip[1])), ip[0]))]


def _neg(key: Any) -> tuple:
    return tuple(-k for k in key) if isinstance(key, tuple) else (-key,)
