"""A policy's analysis rows on one game: its exploitability and each seat's perfect-play walk.

The one place these rows are built: `arena eval --exploitability / --perfect-play`
(`evaluation.run`) stores them as they are; the training loop's evaluation points
(`training.periodic_eval`) take their fields into eval.jsonl.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from evaluation.exact_vs_random import PolicyTable
from evaluation.exploitability import exploitability
from evaluation.perfect_play import perfect_play


def exploitability_row(
    agent,
    game: str,
    params: dict,
    samples: int = 8,
    seed: int = 0,
    max_states: int = 5000,
    name: str = "agent",
    progress=None,
) -> dict:
    """`agent`'s exploitability on `game` (`evaluation.exploitability.exploitability`) as a row.

    Returns:
        The `ExploitabilityResult`'s fields: {"game", "exploitability", "nash_conv", "method",
        "states", "invalid_share", "seconds", "agent", "mode", "kind"}.
    """
    return asdict(exploitability(agent, game, params, samples, seed, max_states, name, progress))


def perfect_play_rows(agent, game: str, params: dict, name: str) -> list[dict]:
    """`agent`'s tree walk against perfect play (`evaluation.perfect_play`) in seat 0, then seat 1.

    Returns:
        Two rows of the `PerfectPlayRow`'s fields, `agent` set to `name`.
    """
    table = PolicyTable(agent, game, params)
    return [asdict(replace(perfect_play(table, seat), agent=name)) for seat in range(2)]
