"""Multi-turn rollouts with and without the transformers backend's prefix cache, side by side in one run.

    python bench/prefix_cache.py                                   # 5-player werewolf, SmolLM2-135M, multi-turn
    python bench/prefix_cache.py --game trust_and_split --model tiny --matches 2 --max-new-tokens 16   # quick
    python bench/prefix_cache.py --tournament configs/tournament_smollm2.yaml   # a tournament's LLM matches
    python bench/prefix_cache.py --tournament configs/tournament_smollm2.yaml --model tiny --games-per-pairing 2

One model is loaded and two `TransformersBackend`s share it: `prefix_cache_mb: 0` (each
batched turn prefills its prompts, a prefix shared within the batch once) and `prefix_cache_mb:
1024` (each prompt prefills only what follows the longest prefix computed before:
the rules and the conversation so far, another match's opening). Each path plays the same
matches (same plans, same per-match sampling seeds) `--repeats` times, in alternating order,
with an empty cache at the start of each run.

Game mode (`--game`, default werewolf with `num_players: 5`; `--params` sets others): the LLM
agent in every seat, `mode: multi_turn` (one growing conversation per match and player, as
MARS), free text where the game asks for a message, a random legal move after an invalid
reply. Tournament mode (`--tournament CONFIG`): every match of the config that an LLM player
plays, against each other player of the config (pairings of bots alone never reach the
backend), with the players' own settings and the config's concurrency.

Prints, per path: the median seconds, completion tokens per second, prompt tokens per LLM
turn, prefill tokens per LLM turn (what the model actually ran) and the speedup; and the
share of turns whose completions agree between the paths (sampling with the same seeds: a
completion differs only where float rounding tips a draw).

Target: >= 3x tokens/s on the werewolf matches with SmolLM2-135M; the tournament no slower.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # machine_limit, run as a script or loaded

from machine_limit import run_facts

import games
from agents import make_agent, parse_spec
from agents.llm_agent import LLMAgent, LLMAgentConfig
from agents.models import load_model
from agents.transformers_backend import TransformersBackend
from arena.runner import MatchPlan, play
from core.machine import set_threads

MODELS = {"tiny": "tiny-llama", "smollm2": "smollm2-135m"}
DEFAULT_PARAMS = {"werewolf": {"num_players": 5}}
LLM = "llm"


class Workload(NamedTuple):
    """What one path plays: the plans, the agents except the LLM ones, the LLM players' configs."""

    plans: list[MatchPlan]
    bots: dict
    llm: dict[str, LLMAgentConfig]
    concurrency: int


def game_workload(args) -> Workload:
    """`--matches` matches of `--game` with the multi-turn LLM agent in every seat."""
    params = {**DEFAULT_PARAMS.get(args.game, {}), **yaml.safe_load(args.params or "{}")}
    seats = len(games.make(args.game, **params).possible_agents)
    plans = [
        MatchPlan(f"m{i:04d}", args.game, [LLM] * seats, args.seed + i, dict(params))
        for i in range(args.matches)
    ]
    config = LLMAgentConfig(
        mode="multi_turn",
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        max_retries=0,
        fallback="random",
        seed=0,
    )
    return Workload(plans, {}, {LLM: config}, args.concurrency or args.matches)


def tournament_workload(args) -> tuple[Workload, str]:
    """Every match of the config's LLM players against each other player; and the LLM model."""
    from tournaments.config import arena_options, load_config  # start-up time: the tournament stack

    cfg = load_config(args.tournament)
    specs = {name: parse_spec(spec) for name, spec in cfg.players.items()}
    llms = {n: s for n, s in specs.items() if s.get("type") == "llm"}
    if not llms or len({s["model"] for s in llms.values()}) != 1:
        raise SystemExit(f"{args.tournament}: the bench needs LLM players of one model")
    fields = set(LLMAgentConfig.__dataclass_fields__)
    configs = {
        n: LLMAgentConfig(**{k: v for k, v in s.items() if k in fields}) for n, s in llms.items()
    }
    per_pairing = args.games_per_pairing or cfg.games_per_pairing
    plans = []
    for a in llms:
        for b in [p for p in cfg.players if p != a and (p not in llms or p > a)]:
            for j, game in enumerate(cfg.games):
                for g in range(per_pairing):
                    seats = [a, b] if (g + j) % 2 == 0 else [b, a]
                    seed = cfg.seed + len(plans)
                    plans.append(
                        MatchPlan(
                            f"{a}|{b}|{j}|{g}",
                            game.name,
                            seats,
                            seed,
                            dict(game.params),
                            game.opening,
                        )
                    )
    bots = {n: make_agent(spec, n) for n, spec in cfg.players.items() if n not in llms}
    concurrency = args.concurrency or arena_options(cfg.arena)["concurrency"]
    return Workload(plans, bots, configs, concurrency), next(iter(llms.values()))["model"]


def run_path(work: Workload, backend: TransformersBackend) -> dict:
    """Play the workload once on `backend` from an empty cache; the path's figures."""
    backend.clear_prefix_cache()
    agents = {**work.bots, **{n: LLMAgent(n, backend, c) for n, c in work.llm.items()}}
    prefilled = backend.prefill_tokens
    start = time.perf_counter()
    records = list(play(work.plans, agents, concurrency=work.concurrency))
    seconds = time.perf_counter() - start
    turns = sorted(
        ((r.match_id, i, t) for r in records for i, t in enumerate(r.turns) if t.agent in work.llm),
        key=lambda x: x[:2],
    )
    return {
        "seconds": seconds,
        "turns": len(turns),
        "completion_tokens": sum(len(t.token_ids) for *_, t in turns),
        "prompt_tokens": sum(len(t.prompt_token_ids) for *_, t in turns),
        "prefill_tokens": backend.prefill_tokens - prefilled,
        "completions": [t.completion for *_, t in turns],
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--game", default="werewolf", help="a multi-player game with talk (default werewolf)"
    )
    p.add_argument("--params", default="", help="game params as YAML, e.g. '{num_players: 6}'")
    p.add_argument(
        "--model",
        default="",
        help="tiny, smollm2 or any agents.models name (default smollm2; a tournament's own)",
    )
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "auto"])
    p.add_argument("--matches", type=int, default=8)
    p.add_argument(
        "--concurrency", type=int, default=0, help="matches live at once (0: all / the config's)"
    )
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument(
        "--temperature", type=float, default=0.7, help="game mode's sampling temperature"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--tournament", default="", help="a tournament config: measure its LLM matches instead"
    )
    p.add_argument(
        "--games-per-pairing", type=int, default=0, help="tournament mode: 0 = the config's"
    )
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (0: chosen from the CPUs and the load)",
    )
    p.add_argument("--out", default="", help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    set_threads(args.threads, verbose=True)
    if args.tournament:
        work, model_name = tournament_workload(args)
    else:
        work, model_name = game_workload(args), "smollm2"
    model_name = MODELS.get(args.model or model_name, args.model or model_name)
    model_tok = load_model(model_name, dtype=args.dtype)
    backends = {
        "off": TransformersBackend(model_tok, prefix_cache_mb=0),
        "on": TransformersBackend(model_tok, prefix_cache_mb=1024),
    }
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for r in range(args.repeats):
        for path in ("off", "on") if r % 2 == 0 else ("on", "off"):
            runs[path].append(run_path(work, backends[path]))
            print(
                f"repeat {r}  prefix cache {path:3}  {runs[path][-1]['seconds']:7.1f} s", flush=True
            )
    out = summary(args, model_name, work, runs)
    if args.out:
        out |= run_facts()
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


def summary(args, model_name: str, work: Workload, runs: dict[str, list[dict]]) -> dict:
    """Median figures of each path, printed side by side."""
    out = {
        "workload": args.tournament or f"{args.game} {work.plans[0].params}",
        "model": model_name,
        "dtype": args.dtype,
        "matches": len(work.plans),
    }
    for path, rs in runs.items():
        seconds = statistics.median(r["seconds"] for r in rs)
        last = rs[-1]
        out[path] = {
            "seconds": seconds,
            "tokens_per_s": last["completion_tokens"] / seconds,
            "llm_turns": last["turns"],
            "prompt_tokens_per_turn": last["prompt_tokens"] / max(last["turns"], 1),
            "prefill_tokens_per_turn": last["prefill_tokens"] / max(last["turns"], 1),
        }
    off, on = runs["off"][-1]["completions"], runs["on"][-1]["completions"]
    out["speedup"] = out["on"]["tokens_per_s"] / out["off"]["tokens_per_s"]
    out["completions_agree"] = sum(a == b for a, b in zip(off, on)) / max(len(off), 1)
    print(f"{out['workload']}, {model_name} ({args.dtype}), {out['matches']} matches")
    print(
        f"{'prefix cache':14}{'seconds':>9}{'tokens/s':>10}{'LLM turns':>11}{'prompt tok/turn':>17}{'prefill tok/turn':>18}"
    )
    for path in ("off", "on"):
        o = out[path]
        print(
            f"{path:14}{o['seconds']:9.1f}{o['tokens_per_s']:10.1f}{o['llm_turns']:11d}"
            f"{o['prompt_tokens_per_turn']:17.1f}{o['prefill_tokens_per_turn']:18.1f}"
        )
    print(f"speedup {out['speedup']:.2f}x; completions agree {out['completions_agree']:.3f}")
    return out


if __name__ == "__main__":
    main()
