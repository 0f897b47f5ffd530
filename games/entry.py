"""`GameEntry`: a game as a config names it (training, tournaments and evaluations share it).

A YAML file writes one as a registry name (`tic_tac_toe`) or a mapping
`{name, params, opening, ...}`. Training adds its own options to it
(`training.config.TrainingGame`: branch, restarts, symmetries) and an evaluation the
opponents it meets (`evaluation.suites.EvalGame`).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.typed_config import above, option

OPENING = "an integer >= 0 (random moves opening each match)"


@dataclass
class GameEntry:
    """One game of a config: its registry name, parameters and opening."""

    name: str
    """registry name, e.g. "tic_tac_toe" or "openspiel:goofspiel\""""
    weight: float = option(1.0, check=above(0))
    """share of the match pairs of a training step (normalised over the games); tournaments and
    evaluations play every game alike and do not take it"""
    params: dict = option(factory=dict)
    """game parameters for `games.make`"""
    opening: int = option(0, what=OPENING, check=(lambda v: v >= 0, OPENING))
    """each match opens with 0..opening uniformly random legal moves (arena.runner.OPENING); in
    training only the self-play matches do (the policy in both seats meets positions its own play
    would not reach), matches against league opponents start as usual"""
