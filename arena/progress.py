"""Live progress of a batch of matches: matches done of total, turns played, generated tokens/s.

    with Progress(total=36, desc="quickstart") as bar:
        records = list(play(plans, agents, progress=bar))

`arena.runner.play` calls `bar.turns(n, tokens)` after every batched agent call (so a long
match shows its turns as they happen, not only when it ends) and `bar.update(1)` per
finished match. On a terminal this is a tqdm bar with a live postfix; otherwise (CI logs,
a file) one plain line at most every `interval` seconds and one at the end, so the log
stays a few lines long however many turns are played.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


class Progress:
    """Matches done / total, with the turns played and generated tokens/s so far.

    Args:
      total: matches to play (may grow: `add_total`, e.g. a tournament's next round).
      desc: the label in front.
      file: where to write (default stderr).
      tty: draw a live bar (default: whether `file` is a terminal).
      interval: seconds between two plain lines when not drawing a bar.
      leave: keep the bar (or write the final line) when closed.
      disable: show nothing.
      unit: what `total` counts (plural), e.g. "states" for an exploitability sweep.
    """

    def __init__(self, total: int = 0, desc: str = "", file: TextIO | None = None,
                 tty: bool | None = None, interval: float = 30.0, leave: bool = True, disable: bool = False,
                 clock: Callable[[], float] = time.monotonic, unit: str = "matches"):
        self.file = file if file is not None else sys.stderr
        self.tty = bool(getattr(self.file, "isatty", lambda: False)()) if tty is None else tty
        self.desc, self.interval, self.leave, self.disable, self.unit = desc, interval, leave, disable, unit
        self.clock = clock
        self.total, self.done, self.turns_played, self.tokens = total, 0, 0, 0
        self.start = self.last_line = self.last_refresh = clock()
        self.bar = None
        if self.tty and not disable:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="match" if unit == "matches" else unit.removesuffix("s"), file=self.file, dynamic_ncols=True, leave=leave)

    def add_total(self, n: int) -> None:
        self.total += n
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def update(self, n: int = 1) -> None:
        """`n` more matches finished."""
        self.done += n
        if self.bar is not None and (self.unit == "matches" or self.turns_played):
            self.bar.set_postfix_str(self.postfix(), refresh=False)
            self.bar.update(n)
        self._tick()

    def turns(self, n: int, tokens: int = 0) -> None:
        """`n` more turns played, `tokens` more tokens generated (one batched agent call)."""
        self.turns_played += n
        self.tokens += tokens
        if self.bar is not None:
            self.bar.set_postfix_str(self.postfix(), refresh=False)
            if self.clock() - self.last_refresh >= 0.2:  # the bar's own clock and rate move too
                self.bar.refresh()
                self.last_refresh = self.clock()
        self._tick()

    def postfix(self) -> str:
        elapsed = max(self.clock() - self.start, 1e-9)
        text = f"{self.turns_played} turns"
        if self.tokens:
            text += f", {self.tokens} tokens ({self.tokens / elapsed:.1f} tok/s)"
        return text

    def line(self) -> str:
        """The plain progress line (without a bar)."""
        head = f"{self.desc}: " if self.desc else ""
        counts = f", {self.postfix()}" if self.unit == "matches" or self.turns_played else ""
        return f"{head}{self.done}/{self.total} {self.unit}{counts}, {_clock(self.clock() - self.start)}"

    def write(self, msg: str, file: TextIO | None = None) -> None:
        """A message above the bar (tqdm.write's signature)."""
        if self.bar is not None:
            self.bar.write(msg, file=file or self.file)
        else:
            print(msg, file=file or self.file, flush=True)

    def _tick(self) -> None:
        if self.bar is None and not self.disable and self.clock() - self.last_line >= self.interval:
            self._print_line()

    def _print_line(self) -> None:
        sys.stdout.flush()  # in order with what the program printed before, when both streams go to one log
        print(self.line(), file=self.file, flush=True)
        self.last_line = self.clock()

    def close(self, failed: bool = False) -> None:
        """End the display; `failed`: no final line (the error says what happened)."""
        if self.bar is not None:
            self.bar.set_postfix_str(self.postfix(), refresh=False)
            self.bar.close()
            self.bar = None
        elif self.leave and not self.disable and not failed and (self.done or self.turns_played):
            self._print_line()
        self.disable = True

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(failed=exc_type is not None)
