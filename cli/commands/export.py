"""`arena export model|trajectories|openspiel ...`: a checkpoint as a Hugging Face model,
trajectories as a dataset or as OpenSpiel trajectories.

arena export model CHECKPOINT_OR_RUN OUT_DIR [--dtype D]
arena export trajectories FILE.jsonl ... OUT [--format parquet|hf] [--per turn|match]
arena export openspiel FILE.jsonl ... OUT.jsonl
"""

from __future__ import annotations

import argparse
import time

from cli.flags import add_overwrite


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the subcommands of `arena export` (model, trajectories, openspiel) to `p`."""
    what = p.add_subparsers(dest="what", required=True)
    m = what.add_parser(
        "model",
        help="a training checkpoint as a Hugging Face model folder (transformers, vLLM, the hub)",
    )
    m.add_argument(
        "source",
        metavar="CHECKPOINT_OR_RUN",
        help="a run folder (its best/ policy, else its newest intact checkpoint), its checkpoints/ "
        "folder, or a step_N or best/ folder",
    )
    m.add_argument("out", metavar="OUT_DIR", help="the model folder to write")
    m.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16", "float16"],
        help="weights dtype (default auto: as the checkpoint saved them)",
    )
    t = what.add_parser(
        "trajectories", help="trajectory JSONL files as Parquet or a Hugging Face datasets folder"
    )
    _add_inputs(t)
    t.add_argument(
        "out", metavar="OUT", help="OUT.parquet is written (or the folder OUT with --format hf)"
    )
    t.add_argument(
        "--format",
        default="parquet",
        choices=["parquet", "hf"],
        help="parquet (default), or hf: a datasets folder (Dataset.save_to_disk; needs datasets)",
    )
    t.add_argument(
        "--per",
        default="turn",
        choices=["turn", "match"],
        help="a row per agent turn (default) or per match",
    )
    o = what.add_parser(
        "openspiel", help="matches of OpenSpiel games as OpenSpiel trajectories (JSONL)"
    )
    _add_inputs(o)
    o.add_argument("out", metavar="OUT.jsonl", help="one OpenSpiel trajectory per line")
    for sub in (m, t, o):
        add_overwrite(sub)


def _add_inputs(p: argparse.ArgumentParser) -> None:
    """The trajectory files an export reads."""
    p.add_argument("inputs", nargs="+", metavar="FILE.jsonl", help="trajectory files")


def run(args: argparse.Namespace) -> None:
    """Write the export `args.what` names and print what it holds."""
    if args.what == "model":
        from agents.hf_export import export_model  # start-up time: torch and transformers

        done = export_model(args.source, args.out, dtype=args.dtype, overwrite=args.overwrite)
        print(
            f"{done.path}: {done.checkpoint} (step {done.step}, base {done.base_model}"
            f"{', LoRA merged' if done.lora_merged else ''}) as a Hugging Face model, {done.dtype}; "
            f"trained in {done.trained_precision or 'an unrecorded precision'}"
        )
    elif args.what == "trajectories":
        from arena.dataset import export_trajectories  # start-up time: pyarrow

        start = time.perf_counter()
        done = export_trajectories(
            args.inputs, args.out, format=args.format, per=args.per, overwrite=args.overwrite
        )
        print(
            f"{done.path}: {done.rows:,} rows ({args.per} rows) from {done.matches:,} matches in "
            f"{done.files} file{'s' * (done.files != 1)}, {time.perf_counter() - start:.1f} s"
        )
    else:
        from arena.openspiel_trajectories import export_openspiel  # start-up time: pyspiel

        done = export_openspiel(args.inputs, args.out, overwrite=args.overwrite)
        skipped = ", ".join(f"{n} of {g}" for g, n in sorted(done.skipped.items()))
        print(
            f"{done.path}: {done.matches:,} OpenSpiel trajectories"
            + (f" (skipped, not OpenSpiel games: {skipped})" if skipped else "")
        )
