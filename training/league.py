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
"""

from __future__ import annotations

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

    def __post_init__(self):
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"unknown PFSP weighting {self.weighting!r}; choose one of {', '.join(WEIGHTINGS)}")
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

    def get(self, name: str) -> Opponent:
        for o in self.opponents:
            if o.name == name:
                return o
        raise KeyError(f"no opponent {name!r} in the league (have: {', '.join(o.name for o in self.opponents) or 'none'})")

    def win_rate(self, name: str) -> float:
        """The learner's decayed win rate against `name` (0.5 if never played)."""
        o = self.get(name)
        return o.wins / o.games if o.games > 0 else 0.5

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

    def sample(self, rng: np.random.Generator, n: int = 1, max_checkpoints: int | None = None) -> list[str]:
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
        kept = [names[ckpts[i]] for i in rng.choice(len(ckpts), size=max_checkpoints, replace=False, p=w)]
        kept_p = np.array([probs[k] for k in kept])
        is_ckpt = {names[i] for i in ckpts}
        return [d if d not in is_ckpt or d in kept else kept[rng.choice(len(kept), p=kept_p / kept_p.sum())] for d in draws]

    def state_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state_dict(cls, d: dict) -> "League":
        d = dict(d)
        d["opponents"] = [Opponent(**o) for o in d.get("opponents", [])]
        return cls(**d)
