"""`arena play GAME --agents A B [--matches N] [--out run.jsonl]`: matches between agents."""

from __future__ import annotations

import argparse
import functools
import time

from cli.flags import add_ray, add_threads, ray_options
from core.overrides import game_params
from core.progress import Progress


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of `arena play` to `p`."""
    p.add_argument("game")
    p.add_argument(
        "--agents",
        nargs="+",
        required=True,
        help="agent specs, one per seat rotation (random, mcts:200, cfr, tit_for_tat, llm:smollm2-135m, ...)",
    )
    p.add_argument("--matches", type=int, default=10)
    p.add_argument(
        "--concurrency",
        type=int,
        default=16,
        help="matches played at once (LLM turns are batched across them)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--param",
        action="append",
        help="game parameter KEY=VALUE, over those a checkpoint trained with (repeatable)",
    )
    p.add_argument("--out", help="append trajectories to this JSONL file")
    p.add_argument(
        "--opening",
        type=int,
        default=0,
        metavar="K",
        help="each match opens with 0..K uniformly random legal moves (varied positions for evaluation)",
    )
    add_threads(p)
    add_ray(p)


def run(args: argparse.Namespace) -> None:
    """Play the matches (here or on Ray workers), print their summary and where they went."""
    import games  # start-up time: this command only
    from agents import check_spec, make_agent  # start-up time: this command only
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
    names = unique_names(args.agents)
    params = _with_trained_params(args.game, args.agents, game_params(args.param))
    for spec in args.agents:  # a bot that cannot play the game says so before any match
        check_spec(spec, [(args.game, params)])
    plans = plan_matches(
        args.game, names, args.matches, seed=args.seed, params=params, opening=args.opening
    )
    ray = ray_options(args)
    if ray:
        from arena.ray_runner import build_players, start_pool  # start-up time: --ray only

        pool = start_pool(ray, functools.partial(build_players, dict(zip(names, args.agents))))
    else:
        agents = {n: make_agent(spec, n) for n, spec in zip(names, args.agents)}
    start = time.perf_counter()
    with Progress(total=len(plans), desc=args.game) as bar:
        if ray:
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


def _with_trained_params(game: str, specs: list[str], params: dict) -> dict:
    """`params` over the game parameters the first checkpoint among `specs` trained `game`
    with (said on stdout): a checkpoint plays on the params it trained with, unless told otherwise."""
    from agents import trained_games  # start-up time: this command only

    for spec in specs:
        trained = next((p for g, p in trained_games(spec) or [] if g == game), {})
        taken = {k: v for k, v in trained.items() if k not in params}
        if taken:
            print(
                f"{game}: {', '.join(f'{k}={v}' for k, v in taken.items())}, "
                f"as {spec} trained it (--param KEY=VALUE to change)"
            )
            return {**trained, **params}
    return params


def unique_names(specs: list[str]) -> list[str]:
    """A player name per spec: the spec, with #2, #3, ... for a spec already taken."""
    names = []
    for s in specs:
        base, n = s, 2
        while s in names:
            s = f"{base}#{n}"
            n += 1
        names.append(s)
    return names
