"""The opponent pool: past checkpoints and bots, matched by prioritized fictitious self-play.

The league keeps, for each opponent B, a decayed record of the learner's results against
it: after a game, `wins <- 0.99 wins + score` and `games <- 0.99 games + 1` (score 1 win,
0.5 draw, 0 loss), so old results fade. The learner's win rate against B is
x_B = wins / games, or 0.5 for an opponent never played. PFSP (AlphaStar) samples B with
probability proportional to f(x_B):

- `hard`     f = (1 - x)^2   focus on opponents the learner loses to;
- `variance` f = x (1 - x)   focus on opponents of similar strength;
- `uniform`  f = 1           plain fictitious self-play.

If every weight is 0 (e.g. `hard` when the learner beats everyone), sampling is uniform.
Checkpoints beyond `max_checkpoints` are retired oldest first; bots stay. The whole state
is a plain dict (`state_dict` / `from_state_dict`) stored in the training checkpoint.

Ratings: after `use_ratings(elo, learner)` (a tournament's Bradley-Terry Elo by league
name, and the name of the player standing for the learner) an opponent the ratings name
gets x_B = 1 / (1 + 10^((R_B - R_learner) / 400)), the learner's Elo expected score, in
place of its decayed record (also a snapshot added later under a rated name); the others
keep their record. `tournament_names` maps a tournament's players to league names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

WEIGHTINGS = ("hard", "variance", "uniform")


@dataclass
class Opponent:
    name: str
    """unique name in the pool (e.g. "ckpt-120" or "random")"""
    kind: str
    """"checkpoint" or "bot\""""
    spec: str
    """how to build it: a checkpoint folder or a bot spec the arena understands"""
    wins: float = 0.0
    """decayed sum of the learner's scores against it"""
    games: float = 0.0
    """decayed number of games against it"""


@dataclass
class League:
    weighting: str = "hard"
    """PFSP weighting: one of WEIGHTINGS"""
    decay: float = 0.99
    """per-game decay of the win-rate record"""
    max_checkpoints: int = 20
    """checkpoints kept in the pool (oldest retired first); bots are always kept"""
    opponents: list[Opponent] = field(default_factory=list)
    """the pool, in insertion order"""
    ratings: dict[str, float] = field(default_factory=dict)
    """Elo of rated opponents by name (`use_ratings`)"""
    learner_rating: float = 0.0
    """Elo of the player that stood for the learner in those ratings"""

    def __post_init__(self):
        if self.weighting not in WEIGHTINGS:
            raise ValueError(
                f"unknown PFSP weighting {self.weighting!r}; choose one of {', '.join(WEIGHTINGS)}"
            )
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {self.decay}")

    def add(self, name: str, kind: str, spec: str) -> None:
        """Add an opponent (re-adding a name replaces its spec and keeps its record)."""
        if kind not in ("checkpoint", "bot"):
            raise ValueError(f"opponent kind must be 'checkpoint' or 'bot', got {kind!r}")
        for o in self.opponents:
            if o.name == name:
                o.kind, o.spec = kind, spec
                return
        self.opponents.append(Opponent(name, kind, spec))
        ckpts = [o for o in self.opponents if o.kind == "checkpoint"]
        for old in ckpts[: max(0, len(ckpts) - self.max_checkpoints)]:
            self.opponents.remove(old)
            self.ratings.pop(old.name, None)

    def get(self, name: str) -> Opponent:
        for o in self.opponents:
            if o.name == name:
                return o
        raise KeyError(
            f"no opponent {name!r} in the league (have: {', '.join(o.name for o in self.opponents) or 'none'})"
        )

    def win_rate(self, name: str) -> float:
        """The learner's expected score against `name`: from the ratings if they name it, else
        its decayed win rate (0.5 if never played)."""
        o = self.get(name)
        if name in self.ratings:
            return 1.0 / (1.0 + 10.0 ** ((self.ratings[name] - self.learner_rating) / 400.0))
        return o.wins / o.games if o.games > 0 else 0.5

    def use_ratings(self, elo: Mapping[str, float], learner: str) -> None:
        """Rate opponents by `elo` (league names -> Elo) from now on, `learner` standing for the
        learner; replaces earlier ratings (opponents `elo` does not name go back to their record)."""
        if learner not in elo:
            raise ValueError(
                f"the ratings have no player {learner!r} to stand for the learner (rated: {', '.join(sorted(elo)) or 'none'})"
            )
        self.ratings = {n: float(r) for n, r in elo.items()}
        self.learner_rating = float(elo[learner])

    def record(self, name: str, score: float) -> None:
        """One game against `name`: score 1 (learner won), 0.5 (draw) or 0 (lost)."""
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"score must be in [0, 1] (1 win, 0.5 draw, 0 loss), got {score}")
        o = self.get(name)
        o.wins = self.decay * o.wins + score
        o.games = self.decay * o.games + 1.0

    def probabilities(self) -> dict[str, float]:
        """PFSP sampling probability of each opponent."""
        if not self.opponents:
            raise ValueError("the league is empty: add checkpoints or bots first")
        x = np.array([self.win_rate(o.name) for o in self.opponents])
        if self.weighting == "hard":
            w = (1 - x) ** 2
        elif self.weighting == "variance":
            w = x * (1 - x)
        else:
            w = np.ones_like(x)
        if w.sum() <= 0:
            w = np.ones_like(x)
        p = w / w.sum()
        return {o.name: float(q) for o, q in zip(self.opponents, p)}

    def sample(
        self, rng: np.random.Generator, n: int = 1, max_checkpoints: int | None = None
    ) -> list[str]:
        """`n` opponent names drawn independently by PFSP.

        `max_checkpoints` caps how many distinct checkpoints one call may return (each is a
        model to hold in memory): that many are chosen first, without replacement by PFSP
        weight, and a draw landing on any other checkpoint is redrawn among the chosen ones
        by their weights. Bots keep their exact share; each checkpoint keeps its share up
        to the cap's rounding.
        """
        probs = self.probabilities()
        names, p = list(probs), np.array(list(probs.values()))
        draws = [names[i] for i in rng.choice(len(names), size=n, p=p)]
        ckpts = [i for i, o in enumerate(self.opponents) if o.kind == "checkpoint" and p[i] > 0]
        if max_checkpoints is None or len(ckpts) <= max_checkpoints:
            return draws
        w = p[ckpts] / p[ckpts].sum()
        kept = [
            names[ckpts[i]]
            for i in rng.choice(len(ckpts), size=max_checkpoints, replace=False, p=w)
        ]
        kept_p = np.array([probs[k] for k in kept])
        is_ckpt = {names[i] for i in ckpts}
        return [
            d
            if d not in is_ckpt or d in kept
            else kept[rng.choice(len(kept), p=kept_p / kept_p.sum())]
            for d in draws
        ]

    def state_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state_dict(cls, d: dict) -> League:
        d = dict(d)
        d["opponents"] = [Opponent(**o) for o in d.get("opponents", [])]
        return cls(**d)


CHECKPOINT_PLAYER = re.compile(
    r"^.+@(\d+)$"
)  # a tournament's `{checkpoints: RUN_DIR}` player NAME@STEP


def tournament_names(
    elo: Mapping[str, float], learner: str | None = None
) -> tuple[dict[str, float], str]:
    """A tournament's ratings under league names, and the league name standing for the learner.

    Players keep their names (bots by spec, a training run's own `ckpt-N` and `policy`);
    `NAME@STEP`, a player of `{checkpoints: RUN_DIR}`, becomes `ckpt-STEP` (NAME@best is
    dropped). The learner is `learner` if given, else `policy` if rated, else the newest
    checkpoint rated.
    """
    out: dict[str, float] = {}
    for player, r in elo.items():
        m = CHECKPOINT_PLAYER.match(player)
        if m:
            out[f"ckpt-{int(m[1])}"] = r
        elif not player.endswith("@best"):
            out[player] = r
    if learner is None:
        steps = [int(n[5:]) for n in out if n.startswith("ckpt-") and n[5:].isdigit()]
        learner = "policy" if "policy" in out else f"ckpt-{max(steps)}" if steps else ""
    if learner not in out:
        raise ValueError(
            f"no rated player stands for the learner: rate `policy` or the run's checkpoints (rated: {', '.join(sorted(elo)) or 'none'})"
        )
    return out, learner
