"""Per-agent results of a set of matches: W/D/L, invalid-move rate, tokens/s."""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass

from arena.records import MatchRecord


@dataclass
class AgentSummary:
    agent: str
    games: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0
    score: float = 0.0  # summed returns
    turns: int = 0
    invalid: int = 0  # turns whose first completion did not parse (retries or fallback used)
    fallbacks: int = 0
    completion_tokens: int = 0

    @property
    def invalid_rate(self) -> float:
        return self.invalid / self.turns if self.turns else 0.0


def summarize(records: list[MatchRecord]) -> list[AgentSummary]:
    table: dict[str, AgentSummary] = {}
    for rec in records:
        for player, agent in rec.seats.items():
            s = table.setdefault(agent, AgentSummary(agent))
            s.games += 1
            s.score += rec.returns.get(player, 0.0)
            result = rec.outcome.get(player, "draw")
            s.wins += result == "win"
            s.draws += result == "draw"
            s.losses += result == "loss"
        for t in rec.turns:
            if t.agent not in table:  # a random opening's moves (arena.runner.OPENING)
                continue
            s = table[t.agent]
            s.turns += 1
            s.invalid += (not t.valid) or t.retries > 0
            s.fallbacks += t.fallback is not None
            s.completion_tokens += sum(len(a.token_ids) for a in t.attempts) or len(t.token_ids)
    return sorted(table.values(), key=lambda s: (-(s.wins + 0.5 * s.draws) / max(s.games, 1), s.agent))


def print_summary(records: list[MatchRecord], seconds: float, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=None if sys.stdout.isatty() else 120)
    table = Table(title=f"{len(records)} matches in {seconds:.1f} s")
    for col in ("agent", "games", "W", "D", "L", "mean return", "invalid-move rate", "fallbacks", "tokens/s"):
        table.add_column(col, justify="left" if col == "agent" else "right")
    for s in summarize(records):
        tps = f"{s.completion_tokens / seconds:.1f}" if s.completion_tokens and seconds > 0 else "-"
        table.add_row(
            s.agent, str(s.games), str(s.wins), str(s.draws), str(s.losses),
            f"{s.score / max(s.games, 1):+.3f}", f"{100 * s.invalid_rate:.1f}%", str(s.fallbacks), tps,
        )
    console.print(table)
    errors = [r for r in records if r.error]
    if errors:
        console.print(f"[yellow]{len(errors)} match(es) aborted, e.g. {errors[0].match_id}: {errors[0].error}")
