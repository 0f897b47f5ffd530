"""Which advantage the training turns that matter get: tic-tac-toe wins and blocks in real batches.

    python -m experiments.tactic_credit.tactic_credit configs/train_tictactoe_tiny.yaml runs/x/checkpoints/step_00000100 \
        --batches 4 --estimators mars,gigpo

Plays `--batches` training batches exactly as `arena train` plans them (the config's
self-play share, openings and league bots; the checkpoint's policy at the config's
temperature), computes every estimator's advantages on the same batches, and sorts the
policy's turns by tactic: an immediate win on the board (taken / missed), else a threat of
the opponent's to block (blocked / missed), else neither. Per tactic and opponent kind
(self-play or the bot) it prints the turns per batch and the mean advantage: a missed
block that gets no more blame than a made one is a tactic the policy cannot learn.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import replace

import numpy as np

from core.records import MatchRecord
from evaluation.exact_vs_random import winning_cells
from training.advantages import TurnSample, compute_advantages


def tactic(record: MatchRecord, turn_index: int) -> str:
    """ "win taken", "win missed", "block made", "block missed" or "other" for the turn's move."""
    history = [int(t.action) for t in record.turns[:turn_index]]
    mover = len(history) % 2
    move = int(record.turns[turn_index].action)
    wins, threats = winning_cells(history, mover), winning_cells(history, 1 - mover)
    if wins:
        return "win taken" if move in wins else "win missed"
    if threats:
        return "block made" if move in threats else "block missed"
    return "other"


def credit_table(
    records: list[MatchRecord], samples: list[TurnSample], opponents: list[str | None]
) -> dict[tuple[str, str], list[float]]:
    """(tactic, "self" or the opponent) -> the advantages of those turns."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in samples:
        opp = opponents[s.match_index] or "self"
        out[(tactic(records[s.match_index], s.turn_index), opp)].append(s.advantage)
    return out


def main(argv: list[str] | None = None) -> None:
    from agents import make_agent
    from training.config import load_config
    from training.rollouts import play_step
    from training.sections import Matches
    from training.selfplay import POLICY, plan_step, start_league

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument(
        "checkpoint", help="a checkpoint or policy folder (runs/x/checkpoints/step_N, runs/x/best)"
    )
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--estimators", default="", help="comma-separated; default: the config's")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    estimators = [e for e in args.estimators.split(",") if e] or [cfg.advantage.estimator]
    league, matches = start_league(cfg.league), Matches.of(cfg)
    rng = np.random.default_rng(args.seed)
    policy = make_agent(f"llm:{args.checkpoint},temperature={cfg.agent.temperature}", POLICY)
    tables = {e: defaultdict(list) for e in estimators}
    for b in range(args.batches):
        planned = plan_step(matches, cfg.league, league, rng, b + 1)
        agents = {POLICY: policy, **{spec: make_agent(spec, spec) for spec in cfg.league.bots}}
        by_id = {p.match_id: opp for p, opp in planned}
        records = play_step(planned, agents, matches)
        opps = [by_id[r.match_id] for r in records]
        for e in estimators:
            samples = compute_advantages(records, replace(cfg.advantage, estimator=e), {})
            for key, adv in credit_table(records, samples, opps).items():
                tables[e][key] += adv
    for e, table in tables.items():
        print(
            f"\n{e}: {args.batches} batches of {cfg.matches_per_step} matches, checkpoint {args.checkpoint}"
        )
        print(f"{'tactic':<14} {'opponent':<10} {'turns/batch':>11} {'mean A':>8} {'A > 0':>6}")
        for (t, opp), adv in sorted(table.items()):
            a = np.array(adv)
            print(
                f"{t:<14} {opp:<10} {len(a) / args.batches:11.1f} {a.mean():+8.3f} {(a > 0).mean():6.2f}"
            )


if __name__ == "__main__":
    main()
