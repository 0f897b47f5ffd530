"""The rich console every command prints through.

Emoji codes are off: rich turns `:100:` into an emoji, so an opponent named `mcts:100` would
print as `mcts💯`. On a terminal the console takes the terminal's width; piped (a log file,
CI) it keeps `piped_width` columns (100: the tables are laid out to fit them), and a plain
line is never broken (soft wrap): a log line stays one line, whatever its length.
"""

from __future__ import annotations

import sys

from rich import box
from rich.console import Console

PIPED_WIDTH = 100  # columns of a table when the output is not a terminal
NARROW_TABLE = {  # `Table` options of a table laid out for 100 columns: a rule under the header,
    "box": box.SIMPLE_HEAD,  # two spaces between columns, no outer border
    "pad_edge": False,
    "collapse_padding": True,
    "show_edge": False,
}


def make_console(piped_width: int = PIPED_WIDTH, **kwargs) -> Console:
    piped = not sys.stdout.isatty()
    kwargs.setdefault("soft_wrap", piped)
    return Console(emoji=False, width=piped_width if piped else None, **kwargs)
