"""`arena eval [CONFIG] --agent SPEC [--baseline SPEC] [--suite train|held_out|all | --games G ...]
[--opponents SPEC ...] [--param [GAME.]KEY=VALUE ...] [--matches N] [--exploitability [--max-states N]] [--perfect-play]
[--out DIR]`:
evaluate an agent (`evaluation.run.evaluate_and_report`)."""

from __future__ import annotations

import argparse
import functools

from cli.flags import add_ray, add_threads, ray_options


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of `arena eval` to `p`."""
    p.add_argument(
        "config",
        nargs="?",
        help="evaluation YAML (keys of evaluation.suites.EvalConfig); flags override it",
    )
    p.add_argument("--agent", help="the evaluated agent's spec (e.g. llm:smollm2-135m)")
    p.add_argument(
        "--baseline", help="a second agent that plays the very same matches; the report pairs them"
    )
    p.add_argument(
        "--suite",
        choices=["train", "held_out", "all"],
        help="catalogue split to evaluate on (default held_out)",
    )
    p.add_argument("--games", nargs="+", metavar="GAME", help="these games instead of a suite")
    p.add_argument(
        "--opponents",
        nargs="+",
        metavar="SPEC",
        help="these opponents in every game (default: each game's own)",
    )
    p.add_argument(
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="game parameter for every evaluated game that has KEY, or GAME.KEY=VALUE for one game; over "
        "a config's params and those a checkpoint trained with (repeatable)",
    )
    p.add_argument(
        "--blank-messages",
        action="store_true",
        help="games with messages (trust_and_split): every match again with the messages blanked, "
        "and what the messages add to welfare, paired",
    )
    p.add_argument("--matches", type=int, help="matches per game and opponent (default 100)")
    p.add_argument("--seed", type=int, help="match seeds derive from it (default 0)")
    _analysis_flags(p)
    p.add_argument("--concurrency", type=int, help="matches played at once (default 16)")
    add_threads(p)
    p.add_argument(
        "--out", help="output folder (default runs/eval): eval.db, eval.jsonl, eval.json, eval.html"
    )
    add_ray(p)


def _analysis_flags(p: argparse.ArgumentParser) -> None:
    """The analyses beyond the matches: --exploitability, --perfect-play and their --samples."""
    p.add_argument(
        "--exploitability",
        action="store_true",
        help="also the exact exploitability of the agent's policy (Kuhn, Leduc, small OpenSpiel games)",
    )
    p.add_argument(
        "--perfect-play",
        action="store_true",
        help="also walk the agent's play over every position it reaches against any opponent, both seats "
        "(tic-tac-toe, games the solver searches to the end): blunders and the loss rate against a perfect "
        "adversary; add temperature=0 to an llm: spec for its greedy play",
    )
    p.add_argument(
        "--samples",
        type=int,
        help="exploitability of a free-text agent: replies sampled per information state (default 8)",
    )
    p.add_argument(
        "--max-states",
        type=int,
        help="exploitability: games with more information states are skipped, with an estimate of "
        "the time NashConv would take (default 5000; 3-player Leduc has 25,800)",
    )


def overrides(args: argparse.Namespace) -> dict:
    """The config keys the flags set (None: not given, the config's or the default value stands)."""
    from evaluation.suites import game_spec, suite  # start-up time: this command only

    given = {
        "agent": args.agent,
        "baseline": args.baseline,
        "suite": args.suite,
        "matches": args.matches,
        "seed": args.seed,
        "exploitability": True if args.exploitability else None,
        "perfect_play": True if args.perfect_play else None,
        "samples": args.samples,
        "max_states": args.max_states,
        "out": args.out,
        "concurrency": args.concurrency,
    }
    if args.games:
        given["games"] = [game_spec(g, args.opponents) for g in args.games]
    elif args.opponents:
        given["games"] = [
            game_spec({"name": g.name, "opponents": args.opponents})
            for g in suite(args.suite or "held_out")
        ]
    return given


def run(args: argparse.Namespace) -> None:
    """Settle the evaluation from the config and the flags, then play, resume and report it."""
    from evaluation.run import check_specs, evaluate_and_report, with_params  # start-up time

    # start-up time: this command only
    from evaluation.suites import load_config, make_config, with_blank_messages

    given = overrides(args)
    if args.config:
        config = load_config(args.config, given)
    else:
        config = make_config({k: v for k, v in given.items() if v is not None})
    # a name a game lacks is an error here, before any model loads
    config, notes = with_params(config, args.param)
    if args.blank_messages:
        config = with_blank_messages(config)
    check_specs(config)
    ray = ray_options(args)
    pool = None
    if ray:
        from arena.ray_runner import start_pool  # start-up time: --ray only

        pool = functools.partial(start_pool, ray)
    evaluate_and_report(config, notes, pool)
