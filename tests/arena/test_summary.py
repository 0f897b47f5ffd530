"""`arena play`'s summary table: rows in the order the agents were given, long agent specs
broken between their options, never inside one."""

import re

from rich.console import Console

from arena.summary import break_at_options, print_summary
from cli.main import main as arena_main
from core.records import MatchRecord


def _agent_cells(table: str) -> list[str]:
    """The agent column of a printed summary, one entry per row (continuation lines joined)."""
    cells: list[str] = []
    for line in table.splitlines():
        if not line.startswith("│"):
            continue
        cell = line.split("│")[1][1:].rstrip()
        if cell.startswith("  ") and cells:
            cells[-1] += cell[2:]
        else:
            cells.append(cell)
    return cells


def test_rows_keep_the_order_the_agents_were_given(capsys):
    # always_defect wins most matches; the table used to sort it first
    agents = ["always_cooperate", "tit_for_tat", "always_defect"]
    assert arena_main(["play", "prisoners_dilemma", "--agents", *agents, "--matches", "6"]) == 0
    assert _agent_cells(capsys.readouterr().out) == agents


def test_a_long_llm_spec_breaks_between_its_options(capsys):
    spec = "llm:tiny-llama,max_new_tokens=3,fallback=random,max_retries=0,temperature=0.3,seed=7,answer_format=brackets"
    assert arena_main(["play", "tic_tac_toe", "--agents", spec, "random", "--matches", "2"]) == 0
    out = capsys.readouterr().out
    assert _agent_cells(out) == [spec, "random"]  # whole, in order
    lines = [line.split("│")[1][1:].rstrip() for line in out.splitlines() if line.startswith("│")]
    assert len(lines) >= 3  # it did not fit on one line at 120 columns...
    assert all(
        line.endswith(",") for line in lines[: len(lines) - 2]
    )  # ...and every break is after an option's comma


def test_break_at_options():
    spec = "llm:smollm2-135m,fallback=random,max_retries=2,temperature=0.3"
    assert break_at_options(spec, 80) == spec
    assert (
        break_at_options(spec, 33)
        == "llm:smollm2-135m,fallback=random,\n  max_retries=2,temperature=0.3"
    )
    assert (
        break_at_options(spec, 20)
        == "llm:smollm2-135m,\n  fallback=random,\n  max_retries=2,\n  temperature=0.3"
    )
    assert (
        break_at_options("random", 3) == "random"
    )  # too long for any line: left whole (the table folds it)


def test_a_narrow_terminal_still_shows_every_option():
    spec = "llm:smollm2-135m,fallback=random,max_retries=2,temperature=0.3"
    rec = MatchRecord(
        match_id="m0",
        game="kuhn_poker",
        params={},
        seed=0,
        seats={"player_0": spec, "player_1": "cfr"},
        returns={"player_0": -1.0, "player_1": 1.0},
        outcome={"player_0": "loss", "player_1": "win"},
    )
    console = Console(width=80, record=True)
    print_summary([rec], 1.0, console, order=[spec, "cfr"])
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= 80
    assert _agent_cells(text) == [spec, "cfr"]
    assert not re.search(r"…", text)
