"""`arena games [--split train|held_out|extra]`: the catalogue; `arena games show NAME`: one game."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of `arena games` to `p`."""
    p.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    p.add_argument("name", nargs="?")
    p.add_argument("--split", choices=["train", "held_out", "extra"])


def run(args: argparse.Namespace) -> None:
    """List the catalogue as a table, or show one game's rules and a sample prompt per seat."""
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
    """Print game `name`'s header, its module's rules and a sample prompt for each seat."""
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
