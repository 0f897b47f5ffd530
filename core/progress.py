"""Live progress of a batch of matches: matches done of total, turns played, generated tokens/s.

    with Progress(total=36, desc="quickstart") as bar:
        records = list(play(plans, agents, progress=bar))

`arena.runner.play` calls `bar.turns(n, tokens)` after every batched agent call (so a long
match shows its turns as they happen, not only when it ends) and `bar.update(1)` per
finished match. On a terminal this is a tqdm bar with a live postfix. Off a terminal (a log
file, a pipe, CI) it is plain text lines, never a control code::

    eval: 120/2000 matches, 6.0%, 5120 turns, 4:10 elapsed, ~65 min left

one each time another `every` (5%) of the total is done (but at most one per `min_gap`
seconds), one at least every `interval` seconds while anything moves, and one at the end: a
50-minute evaluation leaves some 20-60 lines.

The time left is the rate of matches finished since the first one (`eta`), shown only once it
has been measured over at least `eta_after` seconds and over as long as the first match took:
the first matches of a batched run end together, after the model's load and warm-up, so the
average from the start would overstate the time left several times over. Without a `file`, when stdout is not a terminal
(`arena eval ... > eval.log`, `| tee`, a background job) the lines go to stdout, where the
run's own output goes, so the log shows how far it got; else a bar on stderr (or plain lines
there when stderr is not a terminal either).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def _left(seconds: float) -> str:
    """A rough time left: ~40 s, ~65 min, ~2.5 h."""
    if seconds < 60:
        return f"~{seconds:.0f} s"
    return f"~{seconds / 60:.0f} min" if seconds < 120 * 60 else f"~{seconds / 3600:.1f} h"


def _isatty(stream) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


def default_stream() -> tuple[TextIO, bool]:
    """(stream, draw a bar) without a given file: stdout when it is not a terminal (its lines then
    land in the log the run's output goes to), else stderr, with a bar when it is a terminal."""
    if not _isatty(sys.stdout):
        return sys.stdout, False
    return sys.stderr, _isatty(sys.stderr)


class Progress:
    """Matches done / total, with the turns played and generated tokens/s so far.

    Args:
      total: matches to play (may grow: `add_total`, e.g. a tournament's next round).
      desc: the label in front.
      file: where to write (default: `default_stream`).
      tty: draw a live bar (default: whether `file` is a terminal).
      interval: the most seconds between two plain lines (while anything moves) when not drawing a bar.
      every: a plain line each time this fraction of `total` more is done...
      min_gap: ...but at most one such line per `min_gap` seconds.
      leave: keep the bar (or write the final line) when closed.
      disable: show nothing.
      unit: what `total` counts (plural), e.g. "states" for an exploitability sweep.
      eta_after: the fewest seconds of finished matches the time left is estimated from.
    """

    def __init__(
        self,
        total: int = 0,
        desc: str = "",
        file: TextIO | None = None,
        tty: bool | None = None,
        interval: float = 60.0,
        leave: bool = True,
        disable: bool = False,
        clock: Callable[[], float] = time.monotonic,
        unit: str = "matches",
        every: float = 0.05,
        min_gap: float = 10.0,
        eta_after: float = 5.0,
    ):
        if file is None:
            file, found_tty = default_stream()
            tty = found_tty if tty is None else tty
        self.file = file
        self.tty = _isatty(file) if tty is None else tty
        self.desc, self.interval, self.leave, self.disable, self.unit = (
            desc,
            interval,
            leave,
            disable,
            unit,
        )
        self.every, self.min_gap, self.eta_after = every, min_gap, eta_after
        self.clock = clock
        self.total, self.done, self.turns_played, self.tokens = total, 0, 0, 0
        self.start = self.last_line = self.last_refresh = clock()
        self.first_done: tuple[float, int] | None = (
            None  # (clock, done) at the first finished match
        )
        self.printed: tuple[int, int] | None = None  # (done, turns) at the last plain line
        self.bar = None
        if self.tty and not disable:
            from tqdm import tqdm  # start-up time: tqdm (a terminal only)

            self.bar = tqdm(
                total=total or None,
                desc=desc,
                unit="match" if unit == "matches" else unit.removesuffix("s"),
                file=self.file,
                dynamic_ncols=True,
                leave=leave,
                # tqdm's own time left is from the average since the start: the `eta` is in the postfix
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",
            )

    def add_total(self, n: int) -> None:
        self.total += n
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def update(self, n: int = 1) -> None:
        """`n` more matches finished."""
        self.done += n
        now = self.clock()
        if n > 0 and (self.first_done is None or now - self.first_done[0] < 0.25):
            # the first match and those that end with it (one batched pass): the rate starts after them
            self.first_done = (self.first_done[0] if self.first_done else now, self.done)
        if self.bar is not None and (self.unit == "matches" or self.turns_played):
            self.bar.set_postfix_str(self._bar_postfix(), refresh=False)
            self.bar.update(n)
        self._tick()

    def turns(self, n: int, tokens: int = 0) -> None:
        """`n` more turns played, `tokens` more tokens generated (one batched agent call)."""
        self.turns_played += n
        self.tokens += tokens
        if self.bar is not None:
            self.bar.set_postfix_str(self._bar_postfix(), refresh=False)
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

    def eta(self) -> float | None:
        """Seconds left at the rate of the matches finished since the first one (and those that ended
        within 0.25 s of it), or None until that rate is measured over `eta_after` seconds and
        over as long as the first match took."""
        if self.first_done is None or not 0 < self.done < self.total:
            return None
        at, done = self.first_done
        span = self.clock() - at
        if self.done <= done or span < max(self.eta_after, at - self.start):
            return None
        return (self.total - self.done) * span / (self.done - done)

    def _bar_postfix(self) -> str:
        left = self.eta()
        return self.postfix() + (f", {_left(left)} left" if left is not None else "")

    def line(self) -> str:
        """The plain progress line (without a bar)."""
        elapsed = self.clock() - self.start
        parts = [f"{self.desc}: " if self.desc else "", f"{self.done}/{self.total} {self.unit}"]
        if self.total:
            parts.append(f", {100 * self.done / self.total:.1f}%")
        if self.unit == "matches" or self.turns_played:
            parts.append(f", {self.postfix()}")
        parts.append(f", {_clock(elapsed)} elapsed")
        if (left := self.eta()) is not None:
            parts.append(f", {_left(left)} left")
        return "".join(parts)

    def write(self, msg: str, file: TextIO | None = None) -> None:
        """A message above the bar (tqdm.write's signature)."""
        if self.bar is not None:
            self.bar.write(msg, file=file or self.file)
        else:
            print(msg, file=file or self.file, flush=True)

    def _bucket(self, done: int) -> int:
        """How many `every` fractions of the total `done` covers."""
        return int(done / self.total / self.every) if self.total and self.every > 0 else 0

    def _tick(self) -> None:
        if self.bar is not None or self.disable:
            return
        since = self.clock() - self.last_line
        done_before = self.printed[0] if self.printed else 0
        if since >= self.interval or (
            since >= self.min_gap and self._bucket(self.done) > self._bucket(done_before)
        ):
            self._print_line()

    def _print_line(self) -> None:
        if self.file is not sys.stdout:
            sys.stdout.flush()  # in order with what the program printed before, when both streams go to one log
        print(self.line(), file=self.file, flush=True)
        self.last_line = self.clock()
        self.printed = (self.done, self.turns_played)

    def close(self, failed: bool = False) -> None:
        """End the display; `failed`: no final line (the error says what happened)."""
        if self.bar is not None:
            self.bar.set_postfix_str(self._bar_postfix(), refresh=False)
            self.bar.close()
            self.bar = None
        elif (
            self.leave
            and not self.disable
            and not failed
            and (self.done or self.turns_played)
            and self.printed != (self.done, self.turns_played)
        ):  # not the line just printed again
            self._print_line()
        self.disable = True

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(failed=exc_type is not None)
