"""The `arena` command line.

arena games [--split train|held_out|extra]   list the catalogue
arena games show NAME                        rules and a sample prompt for each seat
arena play GAME --agents A B [--matches N] [--out run.jsonl]
arena serve MODEL [--port 8000]              an OpenAI-compatible endpoint
arena tournament CONFIG                      create or resume a tournament
arena eval [CONFIG] --agent SPEC [--baseline SPEC] [--suite train|held_out|all | --games G ...]
           [--opponents SPEC ...] [--param [GAME.]KEY=VALUE ...] [--matches N] [--exploitability] [--perfect-play] [--out DIR]   evaluate an agent
arena train CONFIG [--resume] [--steps N] [--out DIR] [--ray ADDRESS] [--set KEY=VALUE ...] [--plan]   self-play RL
arena plot RUN_DIR [RUN_DIR ...] [--out PNG] [--target 0.9]  evaluation curves of runs (seeds) on one chart
arena export model CHECKPOINT_OR_RUN OUT_DIR [--dtype D]      a Hugging Face model folder
arena export trajectories FILE.jsonl ... OUT [--format parquet|hf] [--per turn|match]   a dataset
arena export openspiel FILE.jsonl ... OUT.jsonl               OpenSpiel trajectories
arena import openspiel TRAJECTORIES ... OUT.jsonl             OpenSpiel trajectories as match records
"""

from __future__ import annotations

import argparse
import functools
import sqlite3
import sys
import time

from core.machine import announce_threads, set_threads
from core.overrides import game_params
from core.progress import Progress
from server.options import add_arguments as serve_arguments


def cmd_games(args: argparse.Namespace) -> None:
    from rich.table import Table  # start-up time: this command only

    import games  # start-up time: this command only
    from core.console import NARROW_TABLE, make_console  # start-up time: this command only

    console = make_console()
    if args.action == "show":
        if not args.name:
            raise ValueError("usage: arena games show NAME")
        _show_game(args.name, console)
        return
    # piped (100 columns): information and rules are left to `arena games show NAME`
    wide = console.width >= 160
    table = Table(
        title="selfplay-arena games (any OpenSpiel game also works as openspiel:<name>)",
        **({} if wide else NARROW_TABLE),
    )
    columns = ["name", "players", "information", "kind", "moves", "split", "rules from"]
    if not wide:
        columns = [c for c in columns if c not in ("information", "rules from")]
    for col in [*columns, "description"]:
        table.add_column(col, no_wrap=col != "description")
    for name in games.names(args.split):
        i = games.info(name)
        cells = {
            "name": name,
            "players": str(i.num_players),
            "information": i.information,
            "kind": i.kind,
            "moves": i.dynamics,
            "split": i.split,
            "rules from": i.source,
        }
        table.add_row(*(cells[c] for c in columns), i.description)
    console.print(table)


def _show_game(name: str, console) -> None:
    import numpy as np  # start-up time: this command only

    import games  # start-up time: this command only

    env = games.make(name)
    env.reset(seed=0)
    info = env.info
    console.rule(
        f"[bold]{name}[/bold]  {info.num_players} players, {info.information} information, "
        f"{info.kind}, {info.dynamics}; rules from {info.source}"
    )
    doc = sys.modules[type(env).__module__].__doc__
    if doc:
        console.print(doc.strip(), markup=False)
    rng = np.random.default_rng(0)
    shown: set[str] = set()
    for _ in range(200):  # walk a random game until every seat has been shown a prompt
        if not env.agents or len(shown) == len(env.possible_agents):
            break
        agent = env.agent_selection
        if env.terminations[agent] or env.truncations[agent]:
            env.step(None)
            continue
        if agent not in shown:
            shown.add(agent)
            console.rule(f"sample prompt for {agent}")
            console.print(env.view(agent).prompt(), markup=False)
        if env.is_free_text(agent):
            env.step("Hello.")
        else:
            mask = env.observe(agent)["action_mask"]
            env.step(int(rng.choice(np.flatnonzero(mask))))


def cmd_play(args: argparse.Namespace) -> None:
    import games  # start-up time: this command only
    from agents import make_agent, trained_games  # start-up time: this command only
    from arena.runner import plan_matches, play  # start-up time: this command only
    from arena.summary import print_summary  # start-up time: this command only
    from core.records import check_jsonl_out  # start-up time: this command only

    games.info(args.game)  # unknown game: clear error before loading any model
    if args.opening < 0:
        raise ValueError(f"--opening must be >= 0, got {args.opening}")
    for flag, n in (("--matches", args.matches), ("--concurrency", args.concurrency)):
        if n < 1:
            raise ValueError(f"{flag} must be >= 1, got {n}")
    if args.out:
        check_jsonl_out(args.out)  # before any model loads
    names = _unique_names(args.agents)
    params = game_params(args.param)
    for (
        spec
    ) in args.agents:  # a checkpoint plays on the params it trained with, unless told otherwise
        trained = next((p for g, p in trained_games(spec) or [] if g == args.game), {})
        taken = {k: v for k, v in trained.items() if k not in params}
        if taken:
            print(
                f"{args.game}: {', '.join(f'{k}={v}' for k, v in taken.items())}, "
                f"as {spec} trained it (--param KEY=VALUE to change)"
            )
            params = {**trained, **params}
            break
    plans = plan_matches(
        args.game, names, args.matches, seed=args.seed, params=params, opening=args.opening
    )
    if args.ray:
        from arena.ray_runner import build_players, pool_from_args  # start-up time: --ray only

        pool = pool_from_args(args, functools.partial(build_players, dict(zip(names, args.agents))))
    else:
        agents = {n: make_agent(spec, n) for n, spec in zip(names, args.agents)}
    start = time.perf_counter()
    with Progress(total=len(plans), desc=args.game) as bar:
        if args.ray:
            records = sorted(
                pool.play(plans, args.concurrency, out=args.out, progress=bar),
                key=lambda r: r.match_id,
            )
        else:
            records = list(
                play(plans, agents, concurrency=args.concurrency, out=args.out, progress=bar)
            )
    print_summary(records, time.perf_counter() - start, order=names)
    if args.out:
        print(f"trajectories: {args.out}")


def _unique_names(specs: list[str]) -> list[str]:
    names = []
    for s in specs:
        base, n = s, 2
        while s in names:
            s = f"{base}#{n}"
            n += 1
        names.append(s)
    return names


def cmd_serve(args: argparse.Namespace) -> None:
    from server.serve import main as serve_main  # start-up time: this command only

    serve_main(args)


def cmd_tournament(args: argparse.Namespace) -> None:
    from tournaments.play import main as tournament_main  # start-up time: this command only

    tournament_main(args)


def cmd_eval(args: argparse.Namespace) -> None:
    from evaluation.run import main as eval_main  # start-up time: this command only

    eval_main(args)


def cmd_train(args: argparse.Namespace) -> None:
    from training.selfplay import main as train_main  # start-up time: this command only

    train_main(args)


def cmd_export(args: argparse.Namespace) -> None:
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


def cmd_import(args: argparse.Namespace) -> None:
    from arena.openspiel_trajectories import import_openspiel  # start-up time: pyspiel

    done = import_openspiel(args.inputs, args.out, overwrite=args.overwrite)
    print(f"{done.path}: {done.matches:,} matches")


def _export_parsers(sub) -> None:
    ex = sub.add_parser(
        "export",
        help="a checkpoint as a Hugging Face model; trajectories as a dataset or OpenSpiel's",
    )
    what = ex.add_subparsers(dest="what", required=True)
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
    t.add_argument("inputs", nargs="+", metavar="FILE.jsonl", help="trajectory files")
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
    o.add_argument("inputs", nargs="+", metavar="FILE.jsonl", help="trajectory files")
    o.add_argument("out", metavar="OUT.jsonl", help="one OpenSpiel trajectory per line")
    for p in (m, t, o):
        p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    ex.set_defaults(func=cmd_export)

    im = sub.add_parser("import", help="OpenSpiel trajectories as match records")
    imw = im.add_subparsers(dest="what", required=True)
    i = imw.add_parser(
        "openspiel", help="OpenSpiel trajectories (JSON or JSONL) as a trajectory JSONL file"
    )
    i.add_argument(
        "inputs",
        nargs="+",
        metavar="TRAJECTORIES",
        help="OpenSpiel trajectory files (JSON or JSONL)",
    )
    i.add_argument("out", metavar="OUT.jsonl", help="the trajectory JSONL file to write")
    i.add_argument("--overwrite", action="store_true", help="replace an existing output")
    im.set_defaults(func=cmd_import)


def _ray_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="play the matches on a Ray cluster (an address, auto, or local to start one here; docs/guides/ray.md)",
    )
    p.add_argument(
        "--ray-workers",
        type=int,
        default=0,
        metavar="N",
        help="match workers (default: one per cluster CPU)",
    )
    p.add_argument(
        "--ray-cpus", type=float, default=1, metavar="N", help="CPUs per worker (its torch threads)"
    )
    p.add_argument(
        "--ray-gpus", type=float, default=0, metavar="N", help="GPUs per worker (for local models)"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="arena", description="LLM agents play games, get ranked, and improve by self-play."
    )
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("games", help="list the game catalogue, or show one game")
    g.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    g.add_argument("name", nargs="?")
    g.add_argument("--split", choices=["train", "held_out", "extra"])
    g.set_defaults(func=cmd_games)

    pl = sub.add_parser("play", help="play matches between agents")
    pl.add_argument("game")
    pl.add_argument(
        "--agents",
        nargs="+",
        required=True,
        help="agent specs, one per seat rotation (random, mcts:200, cfr, tit_for_tat, llm:smollm2-135m, ...)",
    )
    pl.add_argument("--matches", type=int, default=10)
    pl.add_argument(
        "--concurrency",
        type=int,
        default=16,
        help="matches played at once (LLM turns are batched across them)",
    )
    pl.add_argument("--seed", type=int, default=0)
    pl.add_argument(
        "--param",
        action="append",
        help="game parameter KEY=VALUE, over those a checkpoint trained with (repeatable)",
    )
    pl.add_argument("--out", help="append trajectories to this JSONL file")
    pl.add_argument(
        "--opening",
        type=int,
        default=0,
        metavar="K",
        help="each match opens with 0..K uniformly random legal moves (varied positions for evaluation)",
    )
    pl.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="torch CPU threads (default 0: chosen from the usable CPUs and the load, printed)",
    )
    _ray_flags(pl)
    pl.set_defaults(func=cmd_play)

    s = sub.add_parser("serve", help="serve a model as an OpenAI-compatible endpoint")
    serve_arguments(s)
    s.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="torch CPU threads (default 0: chosen from the usable CPUs and the load, printed)",
    )
    s.set_defaults(func=cmd_serve)

    t = sub.add_parser("tournament", help="create or resume a tournament from a YAML config")
    t.add_argument(
        "config",
        help="tournament YAML: players, games, format, rating (e.g. configs/quickstart.yaml)",
    )
    t.add_argument(
        "--db",
        help="SQLite file (default: runs/<name>/tournament.db; trajectories and report beside it)",
    )
    t.add_argument(
        "--report-only",
        action="store_true",
        help="only print a finished tournament's leaderboard and rewrite its HTML report",
    )
    t.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="torch CPU threads (default 0: chosen from the usable CPUs and the load, printed)",
    )
    _ray_flags(t)
    t.set_defaults(func=cmd_tournament)

    e = sub.add_parser(
        "eval",
        help="evaluate an agent on a suite of games with CIs (and against a baseline, paired)",
    )
    e.add_argument(
        "config",
        nargs="?",
        help="evaluation YAML (keys of evaluation.suites.EvalConfig); flags override it",
    )
    e.add_argument("--agent", help="the evaluated agent's spec (e.g. llm:smollm2-135m)")
    e.add_argument(
        "--baseline", help="a second agent that plays the very same matches; the report pairs them"
    )
    e.add_argument(
        "--suite",
        choices=["train", "held_out", "all"],
        help="catalogue split to evaluate on (default held_out)",
    )
    e.add_argument("--games", nargs="+", metavar="GAME", help="these games instead of a suite")
    e.add_argument(
        "--opponents",
        nargs="+",
        metavar="SPEC",
        help="these opponents in every game (default: each game's own)",
    )
    e.add_argument(
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="game parameter for every evaluated game that has KEY, or GAME.KEY=VALUE for one game; over "
        "a config's params and those a checkpoint trained with (repeatable)",
    )
    e.add_argument("--matches", type=int, help="matches per game and opponent (default 100)")
    e.add_argument("--seed", type=int, help="match seeds derive from it (default 0)")
    e.add_argument(
        "--exploitability",
        action="store_true",
        help="also the exact exploitability of the agent's policy (Kuhn, Leduc, small OpenSpiel games)",
    )
    e.add_argument(
        "--perfect-play",
        action="store_true",
        help="also walk the agent's play over every position it reaches against any opponent, both seats "
        "(tic-tac-toe, games the solver searches to the end): blunders and the loss rate against a perfect "
        "adversary; add temperature=0 to an llm: spec for its greedy play",
    )
    e.add_argument(
        "--samples",
        type=int,
        help="exploitability of a free-text agent: replies sampled per information state (default 8)",
    )
    e.add_argument("--concurrency", type=int, help="matches played at once (default 16)")
    e.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="torch CPU threads (default 0: chosen from the usable CPUs and the load, printed)",
    )
    e.add_argument(
        "--out", help="output folder (default runs/eval): eval.db, eval.jsonl, eval.json, eval.html"
    )
    _ray_flags(e)
    e.set_defaults(func=cmd_eval)

    tr = sub.add_parser("train", help="self-play RL from a YAML config")
    tr.add_argument("config", help="training YAML (e.g. configs/train_tictactoe_tiny.yaml)")
    tr.add_argument(
        "--resume", action="store_true", help="continue from the run dir's latest checkpoint"
    )
    tr.add_argument(
        "--steps",
        type=int,
        help="where the run stops (overrides the config's steps); a fresh run's cosine lr schedule "
        "spans it, a resumed run keeps the schedule it started with",
    )
    tr.add_argument("--out", help="override the config's run_dir")
    tr.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="override the config's threads (0: chosen from the CPUs and the load)",
    )
    tr.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="rollouts on Ray workers: override the config's ray.address (local, auto or HOST:PORT; docs/guides/ray.md)",
    )
    tr.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config key, dotted for sections (e.g. --set learner.lr=1e-4); repeatable; the flags above win",
    )
    tr.add_argument(
        "--plan",
        action="store_true",
        help="print the predicted peak device memory (weights, master copy, optimizer state, KL "
        "reference, gradients, activations, the rollout engine's share) and whether it fits; train nothing",
    )
    tr.add_argument(
        "--device-memory",
        type=float,
        metavar="GIB",
        help="with --plan: plan for a card of this many GiB (default: the CUDA card present, else this machine's memory)",
    )
    tr.set_defaults(func=cmd_train)

    pt = sub.add_parser("plot", help="evaluation curves of one or more training runs on one chart")
    pt.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="a training run folder, or a seed sweep's data file (.json rows that kept their runs' evaluation rows)",
    )
    pt.add_argument(
        "--out", help="PNG path (default for one run: RUN_DIR/eval.png; required for several)"
    )
    pt.add_argument(
        "--labels", help="comma-separated legend names, one per run (default: the run dir names)"
    )
    pt.add_argument("--target", type=float, help="draw a dotted line at this rate (e.g. 0.9)")
    pt.set_defaults(func=cmd_plot)
    _export_parsers(sub)
    return p


def cmd_plot(args: argparse.Namespace) -> None:
    from training.plots import plot_eval  # start-up time: this command only

    labels = args.labels.split(",") if args.labels else None
    print(plot_eval(args.runs, args.out, labels, target=args.target))


_MATCHES_KEPT = (
    " (the matches finished before are kept: fix this, then run the same command to go on)"
)
AFTER_A_FAILED_WRITE = {  # what a failed write (a full disk) leaves, and the way on
    "train": " (the checkpoints written before are intact: fix this, then add --resume)",
    "tournament": _MATCHES_KEPT,
    "eval": _MATCHES_KEPT,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        announce_threads(printer=lambda line: None)  # an earlier call's line is not this command's
        if args.command in (
            "play",
            "serve",
            "tournament",
            "eval",
        ):  # train sets its config's threads
            set_threads(args.threads, verbose=False)  # printed when a model loads
        args.func(args)
    except (ValueError, RuntimeError, OSError, KeyError, sqlite3.Error) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if isinstance(e, sqlite3.Error):
            msg = f"results store (SQLite): {msg}"
        if (
            isinstance(e, (OSError, sqlite3.Error)) and not isinstance(e, FileNotFoundError)
        ) or getattr(e, "matches_kept", False):  # e.g. a full disk, a failing backend
            msg += AFTER_A_FAILED_WRITE.get(args.command, "")
        print(f"arena {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # a command may say what it kept and how to go on
        print(f"arena {args.command}: interrupted" + (f": {e}" if str(e) else ""), file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
