"""The tournament store: one SQLite file (WAL) that survives `kill -9`.

Tables
    meta      key -> value: "config" (canonical JSON of the TournamentConfig), "status"
    players   name -> agent spec (JSON)
    schedule  every match the format has asked for so far: match_id (unique), round,
              label, position, game, params, seed, seats, opening — written before it
              is played
    matches   every finished match: match_id (unique, references schedule), scores,
              outcome, trajectory (the JSONL file holding its MatchRecord), error

Crash safety: the arena appends a match's `MatchRecord` to the JSONL beside the DB
(`core.records.append_jsonl`, fsynced) *before* the result is inserted here, and each
insert is one transaction. So the JSONL is the durable log: after a kill it holds every
stored match and maybe a few more, and `read_log` gives the matches the store lacks so the
runner inserts them instead of replaying them (a deleted DB is rebuilt from it the same
way), leaving no lost and no duplicated match in either file. `read_log` also cuts a torn
last line and sets lines it cannot read aside, into "<name>.jsonl.corrupt-<time>", so new
matches are never appended after junk. One process per tournament: `lock()` takes an
exclusive lock on "<db>.lock" (released by the OS on kill). `Store(path, readonly=True)`
reads a store another process may be writing (its leaderboard so far) without writing.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.records import MatchRecord, check_writable, other_seat_of

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS players (name TEXT PRIMARY KEY, spec TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS schedule (
    match_id TEXT PRIMARY KEY, round INTEGER NOT NULL, label TEXT NOT NULL, position INTEGER NOT NULL,
    game TEXT NOT NULL, params TEXT NOT NULL, seed INTEGER NOT NULL, seats TEXT NOT NULL,
    opening INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS matches (
    match_id TEXT PRIMARY KEY REFERENCES schedule(match_id), scores TEXT NOT NULL, outcome TEXT NOT NULL,
    trajectory TEXT, error TEXT, finished_at REAL NOT NULL);
"""


@dataclass
class MatchSpec:
    """One match the tournament wants played (what the arena's runner needs)."""

    match_id: str  # stable: "<round label>|<player a>|<player b>|<game index>.<game>|<game number>"
    game: str  # registry name
    params: dict  # game parameters
    seed: int  # env seed, derived from the tournament seed and match_id
    seats: list[str]  # player names in seat order: seats[i] plays player_i
    round: int = 0  # format round (0-based) that scheduled it
    label: str = ""  # round label ("RR", "S2", "W1", "L3", "GF", ...)
    opening: int = 0  # the match opens with 0..opening random legal moves (arena.runner.MatchPlan)


@dataclass
class MatchResult:
    """A finished match as the tournament needs it."""

    match_id: str
    scores: dict[str, float]  # player name -> return of the match
    outcome: dict[str, str]  # player name -> "win" | "loss" | "draw"
    trajectory: str | None = None  # JSONL file holding the full MatchRecord (key: match_id)
    error: str | None = None  # set when the arena aborted the match (outcome then draws)
    finished_at: float = field(default_factory=time.time)

    def points(self, player: str) -> float:
        """1 for a win, 0.5 for a draw, 0 for a loss."""
        return {"win": 1.0, "draw": 0.5, "loss": 0.0}[self.outcome[player]]

    @classmethod
    def from_record(
        cls, record, trajectory: str | os.PathLike | None = None, sides: bool = False
    ) -> MatchResult:
        """From an `core.records.MatchRecord` (seats map env agents to player names). `sides`:
        a player holds every seat of its team (`X`, `X#2`, ...: `seat_players`), and its score
        is its team's summed returns."""
        names = record.seats
        if len(set(names.values())) != len(names):
            raise ValueError(
                f"match {record.match_id}: one player in several seats; tournament matches are between distinct players"
            )
        players = seat_players(names) if sides else dict(names)
        scores: dict[str, float] = {}
        outcome: dict[str, str] = {}
        for a, r in record.returns.items():  # a player a side: its team's returns summed
            scores[players[a]] = scores.get(players[a], 0.0) + float(r)
        for a, o in record.outcome.items():  # a team's seats share its outcome
            outcome.setdefault(players[a], o)
        return cls(
            match_id=record.match_id,
            scores=scores,
            outcome=outcome,
            trajectory=str(trajectory) if trajectory is not None else None,
            error=record.error,
            finished_at=record.finished_at or time.time(),
        )


def seat_players(names: dict[str, str]) -> dict[str, str]:
    """Seat -> player of a match record: a seat named `X#k` (k a number) whose X also sits in
    the match is another seat of player X (a tournament played by `sides`); others their own."""
    present = set(names.values())
    out = {}
    for seat, name in names.items():
        base = other_seat_of(name)
        out[seat] = base if base in present else name
    return out


def jsonl_beside(db_path: str | os.PathLike) -> Path:
    """The trajectory file of a tournament DB: "t.db" -> "t.jsonl"."""
    return Path(db_path).with_suffix(".jsonl")


def kept_on_interrupt(db_path: str | os.PathLike) -> str:
    """What a run stopped by Ctrl-C leaves in its store, and the way on: "N of the M matches
    scheduled so far are kept in DB; run the same command to resume"."""
    try:
        with Store(db_path, readonly=True) as store:
            done, scheduled = store.count()
    except (ValueError, sqlite3.Error):  # no store yet (stopped while the models loaded)
        done = scheduled = 0
    if not scheduled:
        return "no match was played yet; run the same command to start"
    return (
        f"{done} of the {scheduled} matches scheduled so far are kept in {db_path}; "
        "run the same command to resume"
    )


class DamagedStore(ValueError):
    """The file is no readable tournament database (garbage, a truncated copy, another
    program's SQLite file). `path` and `reason` say which and why."""

    def __init__(self, path: str | os.PathLike, reason: object):
        self.path, self.reason = Path(path), str(reason).strip().splitlines()[0]
        super().__init__(f"{self.path} is not a tournament database ({self.reason})")


def open_or_rebuild(db: str | os.PathLike, jsonl: str | os.PathLike) -> Store:
    """Open the store in `db` for writing; a damaged one (`DamagedStore`) is moved aside, with
    its -wal and -shm files, to "<db>.damaged-<time>" (said on stderr) and rebuilt from the
    trajectories in `jsonl` when that file holds matches (as a deleted DB is). Without them
    the DamagedStore is raised with the way on: nothing is deleted."""
    db, jsonl = Path(db), Path(jsonl)
    try:
        return Store(db)
    except DamagedStore as e:
        if not read_log(jsonl):
            raise ValueError(
                f"{e}; {jsonl} holds no match to rebuild it from: move it aside (or give another --db) "
                "to start the tournament over"
            ) from None
        if Store.running(db):
            raise ValueError(f"{e}; another process is running it") from None
        aside = db.with_name(f"{db.name}.damaged-{int(time.time())}")
        for suffix in ("", "-wal", "-shm"):
            part = Path(f"{db}{suffix}")
            if part.exists():
                part.rename(f"{aside}{suffix}")
        print(
            f"warning: {e}: moved aside to {aside}; rebuilding the store from {jsonl}",
            file=sys.stderr,
        )
        return Store(db)


class Store:
    """A tournament's SQLite file."""

    def __init__(self, path: str | os.PathLike, readonly: bool = False):
        self.path = Path(path)
        self._lock = None
        if self.path.is_dir():
            raise ValueError(f"{self.path} is a folder, not a tournament database file")
        if readonly:
            self.conn = _connect_readonly(self.path)
            return
        check_writable(self.path)  # the DB, its -wal, -shm and .lock files live in its folder
        self.conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
            check = self.conn.execute("PRAGMA quick_check").fetchone()[0]  # a truncated file
            if check != "ok":
                raise DamagedStore(self.path, check)
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            self.conn.executescript(SCHEMA)
        except sqlite3.DatabaseError as e:
            self.conn.close()
            if _cannot_open(e):
                raise ValueError(f"cannot write to {self.path.parent} ({e})") from None
            raise DamagedStore(self.path, e) from None
        except DamagedStore:
            self.conn.close()
            raise
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(schedule)")}
        if "opening" not in columns:  # a store written before openings existed
            self.conn.execute("ALTER TABLE schedule ADD COLUMN opening INTEGER NOT NULL DEFAULT 0")

    def close(self) -> None:
        self.conn.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def lock(self) -> None:
        """Hold an exclusive lock for this process; a second runner gets a clear error."""
        f = open(str(self.path) + ".lock", "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise RuntimeError(f"tournament {self.path} is being run by another process") from None
        self._lock = f

    @staticmethod
    def running(path: str | os.PathLike) -> bool:
        """Is a process running the tournament in `path` now (holding its lock)?"""
        lock = Path(str(path) + ".lock")
        if not lock.is_file():
            return False
        with open(lock, "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
        return False

    # -- config ------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self.conn:
            self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def pin_checkpoints(self, playing: dict[str, str | None]) -> None:
        """Record the training checkpoint each player plays (`agents.checkpoint_of`, None for the rest); once
        matches are stored, a resume where a player's checkpoint moved on (`llm:RUN` after more training) is a
        one-line error, not a store mixing two policies' matches."""
        played = json.loads(self.meta("checkpoints") or "{}")
        moved = [n for n in playing if n in played and played[n] != playing[n]]
        if self.count()[0] and moved:
            n = moved[0]
            raise ValueError(
                f"{self.path} holds matches of {n} = {played[n]}; it now plays {playing[n]}: "
                "use another output path (or delete it) to play the new policy"
            )
        self.set_meta("checkpoints", json.dumps(playing))

    def config_diff(
        self, config_json: str, players: dict, key: Callable[[str], dict] = json.loads
    ) -> str:
        """How `config_json` differs from the stored config ("" when it does not, or none is
        stored): the keys whose values differ under `key` (which maps a config's JSON to
        what must stay the same), or the players' order (it sets seats and seeding)."""
        stored = self.meta("config")
        if stored is None:
            return ""
        diff = _diff(key(stored), key(config_json))
        if not diff and list(self.players()) != list(players):
            diff = "the order of the players (it sets seats and seeding)"
        return diff

    def init(self, config_json: str, players: dict, key: Callable[[str], dict] = json.loads) -> str:
        """Record a new tournament, or check that a resumed one has the same config.

        `key` maps a config's JSON to what a resume must keep (`TournamentConfig.resume_key`:
        e.g. arena concurrency and rating options may change); the stored config keeps the
        first. A store with no finished match yet takes a changed config over (a first run
        that failed on a bad config leaves nothing worth keeping). Returns "new",
        "resumed" or "restarted" (the config was taken over).
        """
        stored = self.meta("config")
        if stored is not None:
            diff = self.config_diff(config_json, players, key)
            if not diff:
                return "resumed"
            if self.count()[0]:
                raise ValueError(
                    f"{self.path} holds a tournament with a different config (differs in: {diff}); use another DB path or delete it"
                )
            with self.conn:  # nothing played yet: start over with the new config
                self.conn.execute("DELETE FROM schedule")
                self.conn.execute("DELETE FROM players")
                self.conn.execute("DELETE FROM meta")
        with self.conn:
            self.conn.execute("INSERT INTO meta VALUES ('config', ?)", (config_json,))
            self.conn.execute("INSERT INTO meta VALUES ('status', 'running')")
            self.conn.executemany(
                "INSERT INTO players VALUES (?, ?)",
                [(n, json.dumps(s, sort_keys=True)) for n, s in players.items()],
            )
        return "new" if stored is None else "restarted"

    def players(self) -> dict:
        return {
            n: json.loads(s)
            for n, s in self.conn.execute("SELECT name, spec FROM players ORDER BY rowid")
        }

    # -- schedule ----------------------------------------------------------------------

    def add_schedule(self, specs: list[MatchSpec]) -> None:
        """Record scheduled matches (idempotent; a replay must schedule the same specs)."""
        known = {s.match_id: s for s in self.schedule([s.match_id for s in specs])}
        new = [s for s in specs if s.match_id not in known]
        for s in specs:
            old = known.get(s.match_id)
            if old is not None and (old.game, old.params, old.seed, old.seats, old.opening) != (
                s.game,
                s.params,
                s.seed,
                s.seats,
                s.opening,
            ):
                raise RuntimeError(
                    f"match {s.match_id} was scheduled differently before (non-deterministic format?)"
                )
        if not new:
            return
        with self.conn:
            start = self.conn.execute(
                "SELECT COALESCE(MAX(position) + 1, 0) FROM schedule"
            ).fetchone()[0]
            self.conn.executemany(
                "INSERT INTO schedule (match_id, round, label, position, game, params, seed, seats, opening) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        s.match_id,
                        s.round,
                        s.label,
                        start + i,
                        s.game,
                        json.dumps(s.params, sort_keys=True),
                        s.seed,
                        json.dumps(s.seats),
                        s.opening,
                    )
                    for i, s in enumerate(new)
                ],
            )

    def schedule(self, ids: list[str] | None = None) -> list[MatchSpec]:
        """Scheduled matches in order (only `ids` when given)."""
        rows = self.conn.execute(
            "SELECT match_id, game, params, seed, seats, round, label, opening FROM schedule ORDER BY position"
        ).fetchall()
        if ids is not None:
            wanted = set(ids)
            rows = [r for r in rows if r[0] in wanted]
        return [
            MatchSpec(m, g, json.loads(p), s, json.loads(seats), r, lab, o)
            for m, g, p, s, seats, r, lab, o in rows
        ]

    # -- results -----------------------------------------------------------------------

    def add_result(self, result: MatchResult) -> None:
        """Store one finished match in one transaction (it must be scheduled, and new)."""
        row = self.conn.execute(
            "SELECT seats FROM schedule WHERE match_id = ?", (result.match_id,)
        ).fetchone()
        if row is None:
            raise ValueError(f"result for unscheduled match {result.match_id!r}")
        seats = json.loads(row[0])
        if set(result.outcome) != set(seats) or set(result.scores) != set(seats):
            raise ValueError(
                f"result for {result.match_id!r} names {sorted(result.outcome)}, the match is between {seats}"
            )
        bad = [o for o in result.outcome.values() if o not in ("win", "loss", "draw")]
        if bad:
            raise ValueError(
                f"result for {result.match_id!r} has outcome {bad[0]!r} (expected win, loss or draw)"
            )
        try:
            with self.conn:
                self.conn.execute(
                    "INSERT INTO matches VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        result.match_id,
                        json.dumps(result.scores),
                        json.dumps(result.outcome),
                        result.trajectory,
                        result.error,
                        result.finished_at,
                    ),
                )
        except sqlite3.IntegrityError:
            raise ValueError(f"match {result.match_id!r} is already stored") from None

    def results(self) -> dict[str, MatchResult]:
        """Stored matches by id, in schedule order."""
        rows = self.conn.execute(
            "SELECT m.match_id, m.scores, m.outcome, m.trajectory, m.error, m.finished_at FROM matches m JOIN schedule s USING (match_id) ORDER BY s.position"
        ).fetchall()
        return {
            m: MatchResult(m, json.loads(sc), json.loads(o), t, e, f) for m, sc, o, t, e, f in rows
        }

    def results_page(
        self, offset: int, limit: int, player: str | None = None, game: str | None = None
    ) -> tuple[list[tuple[MatchSpec, MatchResult]], int]:
        """Stored matches newest first, `limit` of them from `offset`, only those of `player` or
        `game` when given, with their specs; and how many match the filter in all. One indexed
        query: a page of a 10,000-match store reads `limit` rows, not the store."""
        where, args = [], []
        if player is not None:
            where.append("EXISTS (SELECT 1 FROM json_each(s.seats) WHERE value = ?)")
            args.append(player)
        if game is not None:
            where.append("s.game = ?")
            args.append(game)
        cond = f"WHERE {' AND '.join(where)}" if where else ""
        join = "FROM matches m JOIN schedule s USING (match_id)"
        (total,) = self.conn.execute(f"SELECT COUNT(*) {join} {cond}", args).fetchone()
        rows = self.conn.execute(
            "SELECT m.match_id, s.game, s.params, s.seed, s.seats, s.round, s.label, s.opening, "
            f"m.scores, m.outcome, m.trajectory, m.error, m.finished_at {join} {cond} "
            "ORDER BY m.rowid DESC LIMIT ? OFFSET ?",
            [*args, limit, offset],
        ).fetchall()
        page = [
            (
                MatchSpec(m, g, json.loads(p), s, json.loads(seats), r, lab, o),
                MatchResult(m, json.loads(sc), json.loads(out), t, e, f),
            )
            for m, g, p, s, seats, r, lab, o, sc, out, t, e, f in rows
        ]
        return page, total

    def count(self) -> tuple[int, int]:
        """(matches stored, matches scheduled)."""
        done = self.conn.execute("SELECT COUNT(*) FROM matches").fetchone()[0]
        sched = self.conn.execute("SELECT COUNT(*) FROM schedule").fetchone()[0]
        return done, sched


@dataclass
class Logged:
    """A match read back from the trajectory file: its result and what it was played as."""

    result: MatchResult
    spec: tuple  # (game, params, seed, seats) to compare with the scheduled MatchSpec

    def check(self, spec: MatchSpec, jsonl: Path) -> MatchResult:
        """The result, if the scheduled `spec` is the match that was played."""
        played = self.spec[3]
        if len(played) != len(spec.seats):  # a player a side: its seats, X, X#2, ...
            played = sorted(set(played)) == sorted(spec.seats) and spec.seats
        if (*self.spec[:3], played) != (spec.game, spec.params, spec.seed, spec.seats):
            raise ValueError(
                f"{jsonl} holds match {spec.match_id!r} played as {self.spec[0]} seed {self.spec[2]} seats {self.spec[3]}, "
                f"but this config schedules it as {spec.game} seed {spec.seed} seats {spec.seats} (a trajectory file of "
                f"another config?); move {jsonl.name} aside to start over"
            )
        return self.result


def read_log(
    jsonl: str | os.PathLike, skip: set[str] = frozenset(), sides: bool = False
) -> dict[str, Logged]:
    """Matches in the trajectory file by id, except those in `skip` (already stored); `sides`:
    as `MatchResult.from_record` reads them.

    Cuts a torn last line (a writer killed mid-line) and sets every line that does not
    read back as a MatchRecord aside, into "<name>.corrupt-<time>" (said on stderr), so
    new matches are appended to a clean file. Of duplicated ids the first counts.
    """
    path = Path(jsonl)
    if not path.exists():
        return {}
    _cut_torn_tail(path)
    out: dict[str, Logged] = {}
    bad: list[int] = []
    with open(path, "rb") as f:
        for n, line in enumerate(f):
            if not line.strip():
                continue
            try:
                rec = MatchRecord.from_dict(json.loads(line))
            except (ValueError, TypeError, KeyError, AttributeError):
                bad.append(n)
                continue
            if rec.match_id in skip or rec.match_id in out:
                continue
            try:
                result = MatchResult.from_record(rec, path, sides)
            except (
                ValueError
            ):  # a readable record, but no tournament match (one player in two seats)
                continue
            players = seat_players(rec.seats) if sides else rec.seats
            out[rec.match_id] = Logged(
                result, (rec.game, rec.params, rec.seed, [players[a] for a in rec.seats])
            )
    if bad:
        _set_aside(path, bad)
    return out


def missing_trajectories(results: dict[str, MatchResult], jsonl: str | os.PathLike) -> list[str]:
    """Ids of stored matches that the trajectory file `jsonl` lacks (it was deleted, replaced
    or cut while the tournament ran; a file that is gone lacks them all), in the order of
    `results`. Results stored without a trajectory are not counted."""
    logged = _logged_ids(Path(jsonl))
    return [m for m, r in results.items() if r.trajectory is not None and m not in logged]


def _logged_ids(path: Path) -> set[str]:
    """The match ids in a trajectory file, read without decoding whole records: a MatchRecord
    line starts with its match_id (`MatchRecord.to_json`)."""
    out: set[str] = set()
    if not path.is_file():
        return out
    head = '{"match_id": '
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                if line.startswith(head):
                    out.add(decoder.raw_decode(line, len(head))[0])
                elif line.strip():
                    out.add(json.loads(line)["match_id"])
            except (ValueError, TypeError, KeyError):
                continue
    return out


def _set_aside(path: Path, bad: list[int]) -> None:
    """Move lines `bad` (0-based) of `path` into "<name>.corrupt-<time>"; the rest stays, in order."""
    aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    wanted = set(bad)
    with open(path, "rb") as src, open(aside, "ab") as junk, open(tmp, "wb") as good:
        for n, line in enumerate(src):
            (junk if n in wanted else good).write(line)
        for f in (junk, good):
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)  # the junk is safe in `aside` before the log loses it
    lines = ", ".join(str(n + 1) for n in bad[:5]) + (", ..." if len(bad) > 5 else "")
    print(
        f"warning: {path}: {len(bad)} unreadable line(s) ({lines}) set aside in {aside}",
        file=sys.stderr,
    )


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection to an existing tournament DB, maybe being written by another
    process (WAL). Nothing is written beside it: in a folder that cannot take the DB's
    -wal and -shm files, a DB closed cleanly (no WAL left to read) is read as the
    immutable file it is, and one with a write-ahead log but no -shm (a killed run copied
    without it) is read from a private copy in memory."""
    if not path.is_file():
        raise ValueError(f"no tournament database at {path}")
    uri = path.resolve().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=30.0, isolation_level=None)
    try:
        tables = _tables(conn)
    except sqlite3.DatabaseError as e:
        conn.close()
        if not _cannot_open(e):
            raise DamagedStore(path, e) from None
        wal = Path(f"{path}-wal")
        if wal.exists() and wal.stat().st_size:
            conn = _copy_in_memory(path, wal, e)
        else:
            conn = sqlite3.connect(
                f"{uri}?mode=ro&immutable=1", uri=True, timeout=30.0, isolation_level=None
            )
        try:
            tables = _tables(conn)
        except sqlite3.DatabaseError as e2:
            conn.close()
            raise DamagedStore(path, e2) from None
    if not {"meta", "players", "schedule", "matches"} <= tables:
        conn.close()
        raise DamagedStore(path, "no tournament tables")
    return conn


def _tables(conn: sqlite3.Connection) -> set[str]:
    """The DB's table names; reading them checks the file is an SQLite DB (and its WAL readable)."""
    return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _cannot_open(e: sqlite3.DatabaseError) -> bool:
    """SQLite could not open (or would have to write) the DB's -wal/-shm files: a folder that
    cannot be written (SQLITE_CANTOPEN as root, SQLITE_READONLY_DIRECTORY for a user)."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY)
    return "unable to open" in str(e) or "readonly" in str(e)


def _copy_in_memory(path: Path, wal: Path, error: Exception) -> sqlite3.Connection:
    """The DB with its write-ahead log applied, read from a copy in a private temporary folder
    into memory (the folder of `path` stays untouched)."""
    with tempfile.TemporaryDirectory(prefix="arena-store-") as tmp:
        db = Path(tmp) / "t.db"
        try:
            shutil.copyfile(path, db)
            shutil.copyfile(wal, f"{db}-wal")
            src = sqlite3.connect(db, isolation_level=None)
            mem = sqlite3.connect(":memory:", isolation_level=None)
            try:
                src.backup(mem)
            finally:
                src.close()
        except (OSError, sqlite3.Error) as e:
            raise ValueError(
                f"cannot read {path} ({error}; its write-ahead log needs {path.parent} writable, "
                f"and a private copy failed: {e})"
            ) from None
    return mem


def _cut_torn_tail(path: Path) -> None:
    """Drop a last line without its newline (a writer killed mid-write)."""
    with open(path, "rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        block = min(size, 1 << 20)
        while True:
            f.seek(size - block)
            data = f.read(block)
            cut = data.rfind(b"\n")
            if cut >= 0 or block == size:
                f.truncate(size - block + cut + 1 if cut >= 0 else 0)
                f.flush()
                os.fsync(f.fileno())
                return
            block = min(size, block * 2)


def _diff(a: dict, b: dict) -> str:
    """The keys whose values differ, comma-separated ("" when none); "arena.max_turns" for a
    key inside a mapping."""
    out = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            out += [f"{k}.{sub}" for sub in sorted(set(x) | set(y)) if x.get(sub) != y.get(sub)]
        elif x != y:
            out.append(k)
    return ", ".join(out)
