"""A training step's rollouts with and without the prompt cache, side by side in one run.

    python bench/prompt_cache.py                                 # the SmolLM2 + LoRA prisoner's dilemma step
    python bench/prompt_cache.py --config configs/train_kuhn_smollm2.yaml
    python bench/prompt_cache.py --set model=tiny-llama --set matches_per_step=8   # quick

Builds the config's policy as `arena train` does (LoRA-wrapped when the config says so, the
in-process transformers backend on the learner's module) and plays one step's matches
(`training.rollouts.plan_step`, `play_step`) `--repeats` times on each path, in alternating
order: `prompt_cache: false` (each batched turn prefills its prompts, distinct ones sharing
their common prefix) and `prompt_cache: true` (each distinct prompt prefilled once a step).
Prints the median seconds of each path, their ratio, the prompts prefilled, and the share of
the policy's moves that agree between the two paths (same plans and sampling seeds; a move
differs only where float rounding tips a draw).

Target: >= 2x on a prompt that repeats (a memory-1 state text).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # machine_limit, run as a script or loaded

from machine_limit import run_facts

from agents.models import load_model
from core.machine import set_threads
from core.overrides import parse_overrides
from training.config import POLICY, load_config
from training.learner import Learner
from training.rollouts import (
    Opponents,
    plan_step,
    play_step,
    start_league,
    step_agents,
    step_lineup,
)
from training.sections import Matches, PolicyModel
from training.setup import make_backend


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--config", default="experiments/reciprocity/train_ipd_aa_smollm2.yaml")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="0: the config's threads")
    p.add_argument("--out", default="", help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    cfg = load_config(args.config, parse_overrides(args.set))
    set_threads(args.threads or cfg.threads, verbose=True)
    model, tok = load_model(cfg.model, dtype="float32")
    policy, matches = PolicyModel.of(cfg), Matches.of(cfg)
    backend = make_backend(policy, Learner(model, tok, cfg.learner), tok)
    league, opponents = start_league(cfg.league), Opponents(policy, cfg.games, backend.device)

    prefilled = {False: 0, True: 0}
    inner = backend._prefill_batch

    def counting(prompts):
        prefilled[current] += len(prompts)
        return inner(prompts)

    backend._prefill_batch = counting
    seconds: dict[bool, list[float]] = {False: [], True: []}
    moves: dict[bool, list[int]] = {}
    for r in range(args.repeats):
        for current in (False, True) if r % 2 == 0 else (True, False):
            rng = np.random.default_rng(cfg.seed)  # the same plans and seeds on both paths
            planned = plan_step(matches, cfg.league, league, rng, 1)
            agents = step_agents(cfg.agent, backend, opponents, step_lineup(league, planned, rng))
            start = time.perf_counter()
            records = play_step(planned, agents, replace(matches, prompt_cache=current))
            seconds[current].append(time.perf_counter() - start)
            moves[current] = [t.action for rec in records for t in rec.turns if t.agent == POLICY]
            print(
                f"repeat {r}  prompt_cache {str(current).lower():5}  {seconds[current][-1]:6.1f} s",
                flush=True,
            )
    plain, cached = statistics.median(seconds[False]), statistics.median(seconds[True])
    agree = float(np.mean(np.array(moves[False]) == np.array(moves[True])))
    out = {
        "config": args.config,
        "model": cfg.model,
        "matches": cfg.matches_per_step,
        "policy_moves": len(moves[True]),
        "seconds_plain": plain,
        "seconds_cached": cached,
        "speedup": plain / cached,
        "prompts_prefilled_plain": prefilled[False] // args.repeats,
        "prompts_prefilled_cached": prefilled[True] // args.repeats,
        "moves_agree": agree,
    }
    print(
        f"{cfg.model}, {cfg.matches_per_step} matches ({out['policy_moves']} policy moves): "
        f"{plain:.1f} s without the prompt cache, {cached:.1f} s with it: {out['speedup']:.2f}x; "
        f"prompts prefilled {out['prompts_prefilled_plain']} -> {out['prompts_prefilled_cached']}; "
        f"moves agree {agree:.3f}"
    )
    if args.out:
        out |= run_facts()
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
