"""The evaluation points of a training run (every `eval.every` steps, the first and the last).

`evaluate` plays the report set (eval.seed; training and eval.held_out games) and the
selection set (eval.select_seed; training games) through `evaluation.run.evaluate`, the
module behind `arena eval`; with eval.exploitability / eval.perfect_play
`exploitability_at` / `perfect_play_at` add the policy's exact exploitability and each
seat's perfect-play walk on every training game (`evaluation.analysis_rows`). None of
it draws from the training RNG streams.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import numpy as np

import games
from agents.llm_agent import LLMAgent, LLMAgentConfig
from core.progress import Progress
from evaluation.analysis_rows import exploitability_row, perfect_play_rows
from evaluation.metrics import summary
from evaluation.run import evaluate as play_and_score
from evaluation.suites import plans
from training.config import POLICY, PeriodicEvalConfig, TrainingGame, eval_games
from training.sections import Matches

EXPLOITABILITY_FIELDS = (
    "kind",
    "game",
    "exploitability",
    "nash_conv",
    "method",
    "states",
    "seconds",
)
PERFECT_PLAY_FIELDS = (
    "kind",
    "game",
    "seat",
    "positions",
    "blunders",
    "blunder_mass",
    "adversary_return",
    "adversary_loss",
)  # of `evaluation.analysis_rows`' rows: what eval.jsonl keeps


def evaluate(
    ev: PeriodicEvalConfig, agent: LLMAgentConfig, matches: Matches, backend, step: int
) -> tuple[list[dict], float]:
    """One evaluation point through `evaluation.run.evaluate` (policy greedy unless
    eval.temperature > 0): the report rows (one per (game, opponent), training and held-out
    games, eval.seed) and the selection score (the mean `selection_score` of the training
    games' selection matches, eval.select_seed: the non-losing rate, or the finishing rank in a
    ranked game; -1 without keep_best).

    Args:
        ev: the run's `eval` section.
        agent: the run's `agent` section (the policy's prompts and sampling).
        matches: how the run plays matches (its games, concurrency, turn cap).
        backend: the rollout backend holding the current weights.
        step: the evaluation point's step.
    """
    train_games, held_out = eval_games(ev, matches.games)

    def cells(games_, n: int, seed: int, what: str):
        policy = LLMAgent(POLICY, backend, replace(agent, temperature=ev.temperature, seed=seed))
        with Progress(
            total=len(plans(POLICY, games_, n, seed)),
            desc=f"eval step {step} ({what})",
            leave=False,
        ) as bar:
            return play_and_score(
                policy,
                games_,
                n,
                seed,
                name=POLICY,
                concurrency=matches.concurrency,
                max_turns=matches.max_turns,
                progress=bar,
            )

    held = {g.name for g in held_out}
    rows = [
        {"step": step, "split": "held_out" if r["game"] in held else "train", **r}
        for r in summary(cells(train_games + held_out, ev.games, ev.seed, "report"))
    ]
    score = -1.0
    if ev.keep_best and train_games:
        chosen = summary(
            cells(train_games, ev.select_games or ev.games, ev.select_seed, "selection")
        )
        seats = {g.name: len(games.make(g.name, **g.params).possible_agents) for g in train_games}
        scores = [selection_score(r, seats[r["game"]]) for r in chosen]
        score = float(np.mean(scores)) if scores else -1.0
    return rows, score


def selection_score(row: dict, seats: int) -> float:
    """A summary row's share of the points in [0, 1]: its non-losing rate, or in a ranked game
    (more than two seats, a social dilemma: no non-losing rate) the share of the other seats
    the policy finished above on average, (seats - mean rank) / (seats - 1)."""
    if row["non_losing"] is not None:
        return row["non_losing"]
    return (seats - row["rank"]) / (seats - 1)


def distinct_games(games_: list[TrainingGame]) -> list[TrainingGame]:
    """The training games, each (name, params) once."""
    out, seen = [], set()
    for g in games_:
        key = (g.name, json.dumps(g.params, sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append(g)
    return out


def exploitability_at(
    ev: PeriodicEvalConfig, agent: LLMAgentConfig, games_: list[TrainingGame], backend, step: int
) -> list[dict]:
    """The exact exploitability of the policy as it plays in training (the `agent` section, at its
    sampling temperature: what `arena eval --agent llm:RUN --exploitability` scores) on each
    training game, one eval.jsonl row per game (kind "exploitability"); none without
    `eval.exploitability`.

    Args:
        ev: the run's `eval` section.
        agent: the run's `agent` section.
        games_: the run's training games.
        backend: the rollout backend holding the current weights.
        step: the evaluation point's step.

    Returns:
        Rows {"step", "split", "kind", "game", "exploitability", "nash_conv", "method", "states", "seconds"}.
    """
    if not ev.exploitability:
        return []
    policy = LLMAgent(POLICY, backend, replace(agent, seed=ev.seed))
    rows = []
    for g in distinct_games(games_):
        r = exploitability_row(policy, g.name, g.params, seed=ev.seed, name=POLICY)
        rows.append({"step": step, "split": "train", **{k: r[k] for k in EXPLOITABILITY_FIELDS}})
    return rows


def perfect_play_at(
    ev: PeriodicEvalConfig, agent: LLMAgentConfig, games_: list[TrainingGame], backend, step: int
) -> list[dict]:
    """Each seat's tree walk of the policy at the evaluation temperature (greedy by default:
    what `python -m evaluation.perfect_play llm:RUN` scores) on each training game, one
    eval.jsonl row per (game, seat) (kind "perfect_play"); none without `eval.perfect_play`.

    Args:
        ev: the run's `eval` section.
        agent: the run's `agent` section.
        games_: the run's training games.
        backend: the rollout backend holding the current weights.
        step: the evaluation point's step.

    Returns:
        Rows {"step", "split", "kind", "game", "seat", "positions", "blunders", "blunder_mass",
        "adversary_return", "adversary_loss", "seconds"}.
    """
    if not ev.perfect_play:
        return []
    policy = LLMAgent(POLICY, backend, replace(agent, seed=ev.seed, temperature=ev.temperature))
    rows = []
    for g in distinct_games(games_):
        t0 = time.perf_counter()
        walked = perfect_play_rows(policy, g.name, g.params, POLICY)
        seconds = time.perf_counter() - t0
        for r in walked:
            rows.append(
                {
                    "step": step,
                    "split": "train",
                    **{k: r[k] for k in PERFECT_PLAY_FIELDS},
                    "seconds": seconds,
                }
            )
    return rows
