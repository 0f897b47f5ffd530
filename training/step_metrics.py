"""What a training step's matches say about the policy: its reward, results against league
opponents, invalid-move rate and response length (metrics.jsonl, TensorBoard, the console)."""

from __future__ import annotations

import numpy as np

from core.records import MatchRecord
from training.config import POLICY


def seat_outcomes(rec: MatchRecord, agent: str) -> list[str]:
    """Outcomes of `agent`'s seats in a match."""
    return [rec.outcome.get(p, "draw") for p, a in rec.seats.items() if a == agent]


def league_scores(rec: MatchRecord, agent: str) -> list[float]:
    """`agent`'s scores against the league opponent of a match (1 win, 0.5 draw, 0 loss), what
    the league's PFSP record counts. Two seats: one per seat of `agent`, from its outcome. More
    seats: one for the match, the mean return of `agent`'s seats against that of the others
    (the opponent's); where `agent` holds several seats, no one seat's result stands for it."""
    if len(rec.seats) <= 2:
        return [{"win": 1.0, "draw": 0.5, "loss": 0.0}[o] for o in seat_outcomes(rec, agent)]
    own = [rec.returns.get(p, 0.0) for p, a in rec.seats.items() if a == agent]
    other = [rec.returns.get(p, 0.0) for p, a in rec.seats.items() if a != agent]
    if not own or not other:
        return []
    gap = np.mean(own) - np.mean(other)
    return [1.0 if gap > 0 else 0.5 if gap == 0 else 0.0]


def rollout_metrics(records: list[MatchRecord], opponents: list[str | None]) -> dict[str, float]:
    """Reward, results against opponents, invalid-move rate and response length of the policy.

    The win/draw/loss rates count the two-player league matches only: in a match of more seats
    (public goods, three-player Kuhn) the policy holds several seats, and a social dilemma has no
    winner; its reward is the figure to watch."""
    returns, results = [], []
    turns = invalid = tokens = 0
    for rec, opp in zip(records, opponents):
        for p, a in rec.seats.items():
            if a == POLICY:
                returns.append(rec.returns.get(p, 0.0))
        if opp is not None and len(rec.seats) <= 2:  # a match of more seats has no one result
            results += seat_outcomes(rec, POLICY)
        for t in rec.turns:
            if t.agent == POLICY:
                turns += 1
                invalid += not t.valid
                tokens += len(t.token_ids)
    m = {
        "reward": float(np.mean(returns)) if returns else 0.0,
        "invalid_rate": invalid / max(1, turns),
        "response_length": tokens / max(1, turns),
        "policy_turns": float(turns),
        "aborted": float(sum(r.error is not None for r in records)),
    }
    if results:
        m.update(
            win_rate=results.count("win") / len(results),
            draw_rate=results.count("draw") / len(results),
            loss_rate=results.count("loss") / len(results),
        )
    return m
