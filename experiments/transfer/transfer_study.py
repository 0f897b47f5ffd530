"""Does self-play on the training games transfer to held-out games? One command.

    python -m experiments.transfer.transfer_study                                  # the three variants, defaults below
    python -m experiments.transfer.transfer_study --variants mars --matches 40     # one variant, a smaller evaluation
    python -m experiments.transfer.transfer_study --variants mars --train-only &   # two variants training side by side,
    python -m experiments.transfer.transfer_study --variants grpo --train-only     # one process (and --threads 1) each; then
    python -m experiments.transfer.transfer_study                                  # evaluates them, the base model once

For each variant (`VARIANTS`: the recipe, the same run with one normalisation shared by all
seats, and grpo; same budget and seeds) it
1. trains `configs/train_mars_smollm2.yaml` with the variant's overrides into OUT/VARIANT/run
   (resuming when a checkpoint is there, so a killed study continues where it stopped);
2. evaluates the trained policy against the base model on the same matches, as
   `arena eval --agent TRAINED --baseline BASE --suite held_out` does (`evaluation.run.run_eval`,
   store in OUT/VARIANT/eval), on the held-out suite plus the training games with their
   training params (the cooperative ones, which have no fixed opponent, only in the curves);
3. computes the exact-tree exploitability of both policies on Kuhn (`--exploitability`).
The base model plays the same matches with the same samples in every variant's evaluation,
so its matches and exploitability are played once and copied into the later variants'
stores (the store's own resume path: a match in the trajectory file is taken, not replayed).

Written to OUT: `study.md` (the paired table per variant: non-losing rate, mean return and
legal-move rate of base and trained, the paired difference with a 95% bootstrap CI; the
ablation table of held-out differences; exploitability; the runs' wall time, matches and
rollout tokens/s), `study.json` (the same numbers and the win rates) and `curves.png` (train-game and
held-out curves over steps, from each run's eval.jsonl).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import yaml

from agents import checkpoint
from core.overrides import merge, parse_overrides
from evaluation.metrics import ALL, paired
from evaluation.run import AGENT, BASELINE, exploitability_rows, run_eval, store_paths
from evaluation.suites import EvalConfig, EvalGame, suite
from training.config import TrainConfig, parse_config

RECIPE = "configs/train_mars_smollm2.yaml"
VARIANTS: dict[str, dict] = {  # name -> overrides of the recipe (nested mappings are merged)
    "mars": {},
    "mars_shared_norm": {
        "advantage": {"agent_specific_norm": False}
    },  # MARS's ablation: one normalisation for all seats
    "grpo": {"advantage": {"estimator": "grpo"}},
}
EXPLOITABILITY_GAMES = (
    "kuhn_poker",
)  # Leduc's 936 information states take hours sampled on this CPU


def variant_config(
    recipe: dict, variant: str, out: Path, overrides: dict | None = None
) -> TrainConfig:
    """The recipe with the variant's and the caller's overrides, run dir OUT/VARIANT/run."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    d = merge(merge(recipe, VARIANTS[variant]), overrides or {})
    d["run_dir"] = str(out / variant / "run")
    try:
        return parse_config(d)
    except ValueError as e:
        raise ValueError(f"variant {variant}: {e}") from None


def agent_spec(model: str, cfg: TrainConfig) -> dict:
    """An LLM agent spec that prompts and samples as the training's evaluation does."""
    settings = {k: v for k, v in asdict(cfg.agent).items() if k != "seed"}
    return {
        "type": "llm",
        "model": model,
        **settings,
        "temperature": cfg.eval.temperature or cfg.agent.temperature,
    }


def eval_games(cfg: TrainConfig) -> list[EvalGame]:
    """The held-out suite, then the training games that have fixed opponents, with their training params."""
    trained = [
        EvalGame(g.name, params=dict(g.params), opponents=list(s.opponents))
        for g in cfg.games
        for s in suite("train")
        if s.name == g.name
    ]
    return suite("held_out") + trained


def eval_config(
    cfg: TrainConfig, policy: str, out: Path, matches: int, seed: int, samples: int
) -> EvalConfig:
    """The paired evaluation of the run's policy against the base model. The final policy is named by its
    checkpoint folder, so a run trained further is a new evaluation (the store restarts), never a resumed one."""
    trained = (
        str(Path(cfg.run_dir) / "best")
        if policy == "best"
        else str(checkpoint.resume_point(Path(cfg.run_dir) / "checkpoints")[0] or cfg.run_dir)
    )
    return EvalConfig(
        agent=agent_spec(trained, cfg),
        baseline=agent_spec(cfg.model, cfg),
        games=eval_games(cfg),
        matches=matches,
        seed=seed,
        samples=samples,
        concurrency=cfg.concurrency,
        out=str(out),
    )


def reuse_baseline(src: Path, dst: Path, samples: int) -> int:
    """Copy the baseline's finished matches and exploitability rows of evaluation `src` into `dst`
    (same baseline, games, matches and seed): `run_eval` takes them from the log instead of replaying."""
    from tournaments.store import Store

    src_db, src_log = store_paths(src)
    dst_db, dst_log = store_paths(dst)
    if not src_log.exists() or dst_log.exists():
        return 0
    dst.mkdir(parents=True, exist_ok=True)
    lines = [
        ln
        for ln in src_log.read_text().splitlines()
        if ln.strip() and json.loads(ln)["match_id"].startswith(f"{BASELINE}|")
    ]
    dst_log.write_text("".join(ln + "\n" for ln in lines))
    with Store(src_db, readonly=True) as s, Store(dst_db) as d:
        for game in EXPLOITABILITY_GAMES:
            key = f"exploitability|{BASELINE}|{game}|{{}}|{samples}"  # as evaluation.run.exploitability_rows keys it
            if (row := s.meta(key)) is not None:
                d.set_meta(key, row)
    return len(lines)


def paired_table(records, seed: int) -> list[dict]:
    """Trained minus base per (game, opponent) and pooled per game (opponent "all"): the pooled-over-seats
    rows of `evaluation.metrics.paired` (non-losing, win, return and legal-move rate, paired bootstrap CIs)."""
    return [asdict(p) for p in paired(records, AGENT, BASELINE, seed) if p.seat == ALL]


def run_summary(run_dir: Path) -> dict:
    """Wall time, steps, training matches and mean rollout tokens/s of a finished run (metrics.jsonl)."""
    path = run_dir / "metrics.jsonl"
    m = (
        [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
        if path.exists()
        else []
    )
    if not m:
        return {"steps": 0, "minutes": 0.0, "games": 0, "rollout_tokens_per_s": 0.0}
    return {
        "steps": m[-1]["step"],
        "minutes": m[-1]["minutes"],
        "games": int(m[-1]["games"]),
        "rollout_tokens_per_s": float(np.mean([r["rollout_tokens_per_s"] for r in m])),
    }


def _ci(x: dict, fmt: str) -> str:
    return f"{x['diff']:{fmt}} [{x['ci'][0]:{fmt}}, {x['ci'][1]:{fmt}}]"


def markdown(study: dict) -> str:
    held = set(study["held_out_games"])
    out = [
        f"# Transfer study ({study['matches']} matches per game and opponent, eval seed {study['seed']})",
        "",
    ]
    out += [
        "| variant | steps | minutes | training matches | rollout tokens/s |",
        "|---|---|---|---|---|",
    ]
    out += [
        f"| {v} | {s['run']['steps']} | {s['run']['minutes']:.1f} | {s['run']['games']} | {s['run']['rollout_tokens_per_s']:.0f} |"
        for v, s in study["variants"].items()
    ]
    for v, s in study["variants"].items():
        out += [
            "",
            f"## {v}: trained minus base, paired (95% bootstrap CI)",
            "",
            "| game | opponent | pairs | non-losing base -> trained | diff | mean return base -> trained | diff | legal moves base -> trained | diff |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in s["paired"]:
            name = f"{r['game']} (held out)" if r["game"] in held else r["game"]
            nl, ret, lg = r["non_losing"], r["mean_return"], r["legal_move_rate"]
            out.append(
                f"| {name} | {r['opponent']} | {r['pairs']} | {nl['baseline']:.2f} -> {nl['agent']:.2f} | {_ci(nl, '+.2f')} "
                f"| {ret['baseline']:+.2f} -> {ret['agent']:+.2f} | {_ci(ret, '+.2f')} | {lg['baseline']:.2f} -> {lg['agent']:.2f} | {_ci(lg, '+.2f')} |"
            )
    variants = list(study["variants"])
    out += [
        "",
        "## Ablation: held-out differences (trained minus base, 95% CI)",
        "",
        "| game | opponent | "
        + " | ".join(f"{v} non-losing | {v} return" for v in variants)
        + " |",
        "|---|---|" + "---|---|" * len(variants),
    ]
    cells = [
        (r["game"], r["opponent"])
        for r in study["variants"][variants[0]]["paired"]
        if r["game"] in held
    ]
    for game, opp in cells:
        row = []
        for v in variants:
            r = next(
                (
                    x
                    for x in study["variants"][v]["paired"]
                    if (x["game"], x["opponent"]) == (game, opp)
                ),
                None,
            )
            row += (
                [_ci(r["non_losing"], "+.2f"), _ci(r["mean_return"], "+.2f")] if r else ["-", "-"]
            )
        out.append(f"| {game} | {opp} | " + " | ".join(row) + " |")
    out += [
        "",
        "## Exploitability (exact best response to the sampled policy)",
        "",
        "| game | policy | exploitability | method |",
        "|---|---|---|---|",
    ]
    for v, s in study["variants"].items():
        for r in s["exploitability"]:
            who = "base" if r["agent"] == BASELINE else v
            if who == "base" and v != variants[0]:
                continue
            out.append(f"| {r['game']} | {who} | {r['exploitability']:.4f} | {r['method']} |")
    return "\n".join(out) + "\n"


def study(
    recipe_path: str,
    variants: list[str],
    out: Path,
    matches: int,
    seed: int,
    samples: int,
    policy: str,
    overrides: dict | None = None,
    console=None,
    train_only: bool = False,
    baseline_from: Path | None = None,
) -> dict:
    """Train, evaluate and tabulate every variant; returns the study (also in OUT/study.json).
    `train_only` stops after training (two variants can then train side by side, one process each).
    `baseline_from`: an earlier study's evaluation folder (VARIANT/eval) whose base-model matches are taken
    instead of played (the base model does not depend on the training seed: a study of another training
    seed with the same evaluation seed and matches plays the same base matches)."""
    from training.plots import plot_eval
    from training.selfplay import train

    say = console.print if console is not None else print
    if not Path(recipe_path).is_file():
        raise ValueError(f"training recipe {recipe_path} not found")
    recipe = yaml.safe_load(Path(recipe_path).read_text())
    configs = {
        v: variant_config(recipe, v, out, overrides) for v in variants
    }  # all checked before anything runs
    result = {
        "recipe": recipe_path,
        "matches": matches,
        "seed": seed,
        "policy": policy,
        "held_out_games": [g.name for g in suite("held_out")],
        "variants": {},
    }
    if baseline_from is not None and not (log := store_paths(baseline_from)[1]).exists():
        raise ValueError(f"--baseline-from {baseline_from}: no evaluation there (expected {log})")
    first_eval: Path | None = baseline_from
    for v, cfg in configs.items():
        if checkpoint.finished(cfg.run_dir, cfg.steps, cfg.max_minutes):
            say(f"== {v}: {cfg.run_dir} has finished training")
        else:
            say(f"== {v}: training into {cfg.run_dir}")
            train(cfg, resume=True, console=console)
        if train_only:
            continue
        ev_dir = out / v / "eval"
        config = eval_config(cfg, policy, ev_dir, matches, seed, samples)
        if first_eval is not None and (n := reuse_baseline(first_eval, ev_dir, samples)):
            say(f"== {v}: {n} baseline matches taken from {first_eval}")
        say(f"== {v}: evaluating {config.agent['model']} against the base model in {ev_dir}")
        run = run_eval(config)
        first_eval = first_eval or ev_dir
        expl = exploitability_rows(
            replace(
                config, games=[EvalGame(g, opponents=["random"]) for g in EXPLOITABILITY_GAMES]
            ),
            {},
        )
        result["variants"][v] = {
            "run": run_summary(Path(cfg.run_dir)),
            "paired": paired_table(run.records, seed),
            "exploitability": expl,
            "eval_dir": str(ev_dir),
            "policy": config.agent["model"],
        }
    if train_only:
        return result
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "study.md").write_text(markdown(result))
    plot_eval([Path(c.run_dir) for c in configs.values()], out / "curves.png", labels=list(configs))
    say(f"tables: {out / 'study.md'}; numbers: {out / 'study.json'}; curves: {out / 'curves.png'}")
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=RECIPE, help=f"training recipe (default {RECIPE})")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--out", default="runs/transfer", help="study folder (default runs/transfer)")
    p.add_argument(
        "--matches",
        type=int,
        default=100,
        help="evaluation matches per game and opponent (default 100)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=7,
        help="evaluation seed (default 7; the training's own eval uses eval.seed)",
    )
    p.add_argument(
        "--samples",
        type=int,
        default=8,
        help="exploitability: replies sampled per information state (default 8)",
    )
    p.add_argument(
        "--policy",
        choices=["final", "best"],
        default="final",
        help="evaluate the final checkpoint, or best/ (picked on the training games' selection matches)",
    )
    p.add_argument(
        "--train-only",
        action="store_true",
        help="train the variants and stop (run again without it to evaluate: the base model is played once)",
    )
    p.add_argument("--steps", type=int, help="override the recipe's steps")
    p.add_argument("--threads", type=int, help="override the recipe's threads")
    p.add_argument(
        "--baseline-from",
        type=Path,
        metavar="EVAL_DIR",
        help="take the base model's matches from this earlier evaluation (e.g. runs/transfer/mars/eval of "
        "another training seed; same --seed and --matches) instead of playing them again",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any recipe key, dotted for sections (e.g. --set learner.lora_rank=16); repeatable",
    )
    args = p.parse_args(argv)
    for name in ("matches", "samples"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    try:
        overrides = parse_overrides(args.set)
    except ValueError as e:
        p.error(str(e))
    if args.steps is not None:
        overrides["steps"] = args.steps
    if args.threads is not None:
        overrides["threads"] = args.threads
    try:
        study(
            args.config,
            args.variants,
            Path(args.out),
            args.matches,
            args.seed,
            args.samples,
            args.policy,
            overrides,
            train_only=args.train_only,
            baseline_from=args.baseline_from,
        )
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
