"""Per-agent results of a set of matches: W/D/L, invalid-move rate, tokens/s."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.table import Table

from arena.runner import generated_tokens
from core.console import make_console
from core.records import MatchRecord


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


def summarize(records: list[MatchRecord], order: list[str] | None = None) -> list[AgentSummary]:
    """One row per agent, in `order` (the agents as the user gave them); by default in the
    order they first take a seat, matches taken by id (the order they were planned in)."""
    table: dict[str, AgentSummary] = {name: AgentSummary(name) for name in order or []}
    for rec in sorted(records, key=lambda r: r.match_id):
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
            s.completion_tokens += generated_tokens(t)
    return list(table.values())


def break_at_options(spec: str, width: int) -> str:
    """`spec` in lines of at most `width` characters, broken after the commas between its
    options (`llm:MODEL,key=value,...`), continuation lines indented; an option longer than
    a line is the only thing cut, and only where it must be."""
    lines: list[str] = []
    for part in re.split(r"(?<=,)", spec):
        if lines and len(lines[-1]) + len(part) <= width:
            lines[-1] += part
        else:
            lines.append(part if not lines else "  " + part)
    return "\n".join(lines)


def print_summary(
    records: list[MatchRecord], seconds: float, console=None, order: list[str] | None = None
) -> None:
    """The summary table, one row per agent in `order` (see `summarize`)."""
    console = console or make_console()
    heads = ("games", "W", "D", "L", "mean\nreturn", "invalid\nmoves", "fall-\nbacks", "tok/s")
    rows = []
    for s in summarize(records, order):
        tps = f"{s.completion_tokens / seconds:.1f}" if s.completion_tokens and seconds > 0 else "-"
        rows.append(
            (
                s.agent,
                str(s.games),
                str(s.wins),
                str(s.draws),
                str(s.losses),
                f"{s.score / max(s.games, 1):+.3f}",
                f"{100 * s.invalid_rate:.1f}%",
                str(s.fallbacks),
                tps,
            )
        )
    # the numbers keep their width; the agent column gets the rest (3 = padding and border per column)
    numbers = (
        sum(
            max(*map(len, h.split("\n")), *(len(r[i + 1]) for r in rows)) + 3
            for i, h in enumerate(heads)
        )
        if rows
        else 0
    )
    width = max(console.width - numbers - 4, 8)
    table = Table(title=f"{len(records)} matches in {seconds:.1f} s")
    table.add_column("agent", overflow="fold", min_width=min(width, 8))
    for h in heads:
        table.add_column(h, justify="right", no_wrap=True)
    for agent, *cells in rows:
        table.add_row(break_at_options(agent, width), *cells)
    console.print(table)
    errors = [r for r in records if r.error]
    if errors:
        console.print(
            f"[yellow]{len(errors)} match(es) aborted, e.g. {errors[0].match_id}: {errors[0].error}"
        )
