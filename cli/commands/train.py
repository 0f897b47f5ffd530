"""`arena train CONFIG [--resume] [--steps N] [--out DIR] [--ray ADDRESS] [--set KEY=VALUE ...] [--plan]`:
self-play RL from a YAML config (`training.selfplay.train`), or its memory plan."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from cli.flags import add_threads


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of `arena train` to `p`."""
    p.add_argument("config", help="training YAML (e.g. configs/train_tictactoe_tiny.yaml)")
    p.add_argument(
        "--resume", action="store_true", help="continue from the run dir's latest checkpoint"
    )
    p.add_argument(
        "--steps",
        type=int,
        help="where the run stops (overrides the config's steps); a fresh run's cosine lr schedule "
        "spans it, a resumed run keeps the schedule it started with",
    )
    p.add_argument("--out", help="override the config's run_dir")
    add_threads(p, config=True)
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="rollouts on Ray workers: override the config's ray.address (local, auto or HOST:PORT; docs/guides/ray.md)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config key, dotted for sections (e.g. --set learner.lr=1e-4); repeatable; the flags above win",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="print the predicted peak device memory (weights, master copy, optimizer state, KL "
        "reference, gradients, activations, the rollout engine's share) and whether it fits; train nothing",
    )
    p.add_argument(
        "--device-memory",
        type=float,
        metavar="GIB",
        help="with --plan: plan for a card of this many GiB (default: the CUDA card present, else this machine's memory)",
    )


def overrides(args: argparse.Namespace) -> dict:
    """The config overrides the flags ask for: `--set KEY=VALUE`s, then `--steps`, `--out`,
    `--threads` and `--ray` over them."""
    from core.overrides import merge, parse_overrides

    given = parse_overrides(args.set)
    if args.steps is not None:
        given["steps"] = args.steps
    if args.out:
        given["run_dir"] = args.out
    if args.threads is not None:
        given["threads"] = args.threads
    if args.ray:
        given = merge(given, {"ray": {"address": args.ray}})
    return given


def run(args: argparse.Namespace) -> None:
    """Load the config with the flags over it; print its memory plan (`--plan`), or train
    (resuming with `--resume`) and print the final evaluation."""
    from training.config import load_config  # start-up time: this command only
    from training.memory_plan import plan_config, render  # start-up time: this command only
    from training.sections import PolicyModel  # start-up time: this command only

    given = overrides(args)
    device_memory = args.device_memory
    if device_memory is not None and not (math.isfinite(device_memory) and device_memory > 0):
        raise ValueError(f"--device-memory must be a size in GiB > 0, got {device_memory:g}")
    if device_memory is not None and not args.plan:
        raise ValueError("--device-memory sizes the card of a memory plan: add --plan")
    cfg = load_config(args.config, given)
    if args.plan:  # the memory plan instead of a run
        plan = plan_config(
            PolicyModel.of(cfg), cfg.concurrency, cfg.league, cfg.ray.address, device_memory
        )
        print(render(plan, f"{args.config}: {cfg.model}"))
        return
    result = _train(cfg, args.config, given, args.resume)
    _print_result(result, cfg.run_dir)


def _train(cfg, config_path: str, given: dict, resume: bool) -> dict:
    """`training.selfplay.train` on `cfg`; an interrupt or an unwritable run folder becomes
    one line that says what is kept and how to go on (cli.main prints it)."""
    import yaml

    from agents import checkpoint  # start-up time: this command only
    from training.selfplay import train  # start-up time: this command only

    sources = [yaml.safe_load(Path(config_path).read_text(encoding="utf-8")), given]
    horizon_given = any(((d.get("learner") or {}).get("total_steps") or 0) for d in sources)
    try:
        return train(cfg, resume=bool(resume), horizon_given=horizon_given)
    except KeyboardInterrupt:  # Ctrl-C: say what is kept and how to go on (cli.main prints it)
        ckpt_dir = Path(cfg.run_dir) / "checkpoints"
        kept = checkpoint.checkpoints(ckpt_dir)
        raise KeyboardInterrupt(
            f"the checkpoints up to {kept[0].name} are kept in {ckpt_dir}; "
            "run the same command with --resume to go on"
            if kept
            else "no checkpoint was written yet; the same command starts the run again"
        ) from None
    except OSError as e:  # the run folder became unwritable (or full) mid-run: one line, the last checkpoint stands
        run_dir = Path(cfg.run_dir).resolve()
        if not e.filename or run_dir not in Path(e.filename).resolve().parents:
            raise
        raise ValueError(f"cannot write to {Path(e.filename).parent} ({e.strerror})") from None


def _print_result(result: dict, run_dir: str) -> None:
    """The final evaluation rows of a run and its totals."""
    from training.console_lines import (  # start-up time: this command only
        eval_words,
        exploitability_words,
        perfect_play_words,
    )

    for r in result["eval"]:
        if r.get("kind") == "exploitability":
            print(f"final {r['game']}: {exploitability_words(r)}")
            continue
        if r.get("kind") == "perfect_play":
            print(f"final {perfect_play_words(r)}")
            continue
        held = " (held out)" if r.get("split") == "held_out" else ""
        print(
            f"final eval {r['game']}{held} vs {r['opponent']}: {r['wins']}W {r['draws']}D {r['losses']}L of {r['games']}, "
            + (
                f"non-losing {r['non_losing']:.3f} (95% CI {r['ci_low']:.3f}-{r['ci_high']:.3f})"
                if r.get("non_losing") is not None
                else eval_words(r)
            )
        )
    print(
        f"{result['games']} training games in {result['elapsed'] / 60:.1f} min; run dir {run_dir}"
    )
