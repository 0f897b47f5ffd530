"""A tournament's leaderboard as it stands, while another process may be writing its store.

`Standings.get(db)` opens the store read-only, counts its matches and, only when the count
differs from the last fit's, reads the tournament so far (`tournaments.run.tournament_so_far`)
and turns it into the report's leaderboard data (`tournaments.report.leaderboard_json`, with
the report's notes): the numbers are the HTML report's, from one code path, and a page
polling every second costs one COUNT query between matches. Games people played into the
tournament in the browser are rated in (`tournaments.people.with_people`; a new one refits).
A store that cannot be read this moment (locked, a writer mid-checkpoint, not yet
initialised) answers with the last standing and the reason (`"stale"`), or with `"error"` when there is none yet.

`Standings.derived(db, fn)` is `fn(result)` of the same fit (the tournament so far that the
standing came from), computed once per fit: the tournament page's heat map and other ratings
(`web.ratings`) cost nothing between matches either.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tournaments.config import stored_config
from tournaments.people import people_jsonl, with_people
from tournaments.report import leaderboard_json, points_note, rating_note
from tournaments.run import TournamentResult, tournament_so_far
from tournaments.store import Store


def standing(db: Path) -> dict:
    """The leaderboard data of the tournament in `db` as far as it is stored (a fit)."""
    return fit(db)[0]


def fit(db: Path) -> tuple[dict, TournamentResult]:
    """The leaderboard data of the tournament in `db` as far as it is stored, and that
    tournament so far."""
    result = with_people(tournament_so_far(stored_config(db), db), db)
    data = leaderboard_json(result)
    data.update(
        finished=result.finished,
        scheduled=len(result.schedule),
        notes=[rating_note(result), points_note(result)],
        games=sorted({s.game for s in result.schedule}),
    )
    return data, result


class Standings:
    """Leaderboards by store, cached by their match count (see the module doc)."""

    def __init__(self) -> None:
        self._cache: dict[Path, dict] = {}
        self._keys: dict[Path, tuple[int, int]] = {}  # (stored matches, people file size) of a fit
        self._results: dict[Path, TournamentResult] = {}
        self._derived: dict[tuple[Path, str], tuple[int, Any]] = {}
        self._locks: dict[Path, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, db: Path) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(db, threading.Lock())

    def get(self, db: Path) -> dict:
        """The standing of `db` now: the leaderboard data, plus `running` (a process holds the
        tournament's lock) and `checked` (unix seconds); `stale` or `error` as the module doc says."""
        with self._lock(db):
            cached = self._cache.get(db)
            try:
                with Store(db, readonly=True) as store:
                    done, _ = store.count()
                people = people_jsonl(db)
                key = (done, people.stat().st_size if people.is_file() else 0)
                if cached is None or self._keys.get(db) != key:
                    cached, self._results[db] = fit(db)
                    self._cache[db], self._keys[db] = cached, key
                out = dict(cached)
            except (ValueError, sqlite3.Error, OSError) as e:
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                out = dict(cached, stale=reason) if cached else {"error": reason, "matches": 0}
        out.update(running=Store.running(db), checked=time.time())
        return out

    def derived(self, db: Path, fn: Callable[[TournamentResult], Any]) -> Any:
        """`fn(result)` of the fit that `get(db)` answers with, computed once per fit (keyed by
        `fn`'s qualified name); None while there is no fit."""
        self.get(db)  # a new fit if a match landed
        with self._lock(db):
            result = self._results.get(db)
            key = (db, f"{fn.__module__}.{fn.__qualname__}")
            done = self._derived.get(key)
        if result is None:
            return None
        count = len(result.results)
        if done is None or done[0] != count:  # outside the lock: the leaderboard keeps answering
            done = self._derived[key] = (count, fn(result))
        return done[1]
