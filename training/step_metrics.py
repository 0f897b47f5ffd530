"""What a training step's matches say about the policy: its reward, results against league
opponents, invalid-move rate and response length (metrics.jsonl, TensorBoard, the console)."""

from __future__ import annotations

import numpy as np

from core.records import MatchRecord
from training.config import POLICY


def seat_outcomes(rec: MatchRecord, agent: str) -> list[str]:
    """Outcomes of `agent`'s seats in a match."""
    return [rec.outcome.get(p, "draw") for p, a in rec.seats.items() if a == agent]


def rollout_metrics(records: list[MatchRecord], opponents: list[str | None]) -> dict[str, float]:
    """Reward, results against opponents, invalid-move rate and response length of the policy."""
    returns, results = [], []
    turns = invalid = tokens = 0
    for rec, opp in zip(records, opponents):
        for p, a in rec.seats.items():
            if a == POLICY:
                returns.append(rec.returns.get(p, 0.0))
        if opp is not None:
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
