"""A tournament's leaderboard as it stands, while another process may be writing its store.

`Standings.get(db)` opens the store read-only, counts its matches and, only when the count
differs from the last fit's, reads the tournament so far (`tournaments.run.tournament_so_far`)
and turns it into the report's leaderboard data (`tournaments.report.leaderboard_json`, with
the report's notes): the numbers are the HTML report's, from one code path, and a page
polling every second costs one COUNT query between matches. A store that cannot be read
this moment (locked, a writer mid-checkpoint, not yet initialised) answers with the last
standing and the reason (`"stale"`), or with `"error"` when there is none yet.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from tournaments.config import stored_config
from tournaments.report import leaderboard_json, points_note, rating_note
from tournaments.run import tournament_so_far
from tournaments.store import Store


def standing(db: Path) -> dict:
    """The leaderboard data of the tournament in `db` as far as it is stored (a fit)."""
    result = tournament_so_far(stored_config(db), db)
    data = leaderboard_json(result)
    data.update(
        finished=result.finished,
        scheduled=len(result.schedule),
        notes=[rating_note(result), points_note(result)],
        games=sorted({s.game for s in result.schedule}),
    )
    return data


class Standings:
    """Leaderboards by store, cached by their match count (see the module doc)."""

    def __init__(self) -> None:
        self._cache: dict[Path, dict] = {}
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
                if cached is None or cached["matches"] != done:
                    cached = self._cache[db] = standing(db)
                out = dict(cached)
            except (ValueError, sqlite3.Error, OSError) as e:
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                out = dict(cached, stale=reason) if cached else {"error": reason, "matches": 0}
        out.update(running=Store.running(db), checked=time.time())
        return out
