"""The rich console every command prints through.

Emoji codes are off: rich turns `:100:` into an emoji, so an opponent named `mcts:100` would
print as `mcts💯`. On a terminal the console takes the terminal's width; piped (a log file,
CI) it keeps `piped_width` columns instead of squeezing tables to 80.
"""

from __future__ import annotations

import sys

from rich.console import Console


def make_console(piped_width: int = 160, **kwargs) -> Console:
    return Console(emoji=False, width=None if sys.stdout.isatty() else piped_width, **kwargs)
