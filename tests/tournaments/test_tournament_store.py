"""The tournament store: a real SQLite file, a real process killed with SIGKILL at random
points and resumed, JSONL recovery, config checks on resume, one runner per tournament."""

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from core.records import read_jsonl
from tournaments.run import load_tournament, run_tournament
from tournaments.sim import bt_play_matches, bt_record, sim_config, strengths_of
from tournaments.store import Store, jsonl_beside

ROOT = Path(__file__).resolve().parents[2]


def reference(tmp_path, fmt, n, k):
    config = sim_config(n, fmt, k)
    db = tmp_path / f"ref-{fmt}.db"
    strengths = strengths_of(list(config.players))
    return run_tournament(config, bt_play_matches(strengths, str(jsonl_beside(db))), db)


def jsonl_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.mark.parametrize(
    "fmt,n,k",
    [pytest.param("double_elimination", 10, 3, marks=pytest.mark.slow), ("swiss", 11, 2)],
)
def test_kill_9_at_random_points_then_resume(tmp_path, fmt, n, k):
    ref = reference(tmp_path, fmt, n, k)
    total = len(ref.schedule)
    db = tmp_path / "t.db"
    jsonl = jsonl_beside(db)
    cmd = [
        sys.executable,
        "-m",
        "tournaments.sim",
        "--db",
        str(db),
        "--players",
        str(n),
        "--format",
        fmt,
        "--k",
        str(k),
        "--delay",
        "0.03",
        "--concurrency",
        "2",
    ]
    rng = random.Random(f"{fmt}-{n}")
    kills = 0
    for _ in range(4):
        before = jsonl_lines(jsonl)
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 60
        while proc.poll() is None and jsonl_lines(jsonl) <= before and time.time() < deadline:
            time.sleep(0.005)  # wait until this run has played at least one match
        time.sleep(rng.uniform(0.0, 0.15))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        assert proc.returncode in (0, -signal.SIGKILL), proc.stderr.read().decode()
        if proc.returncode == 0:
            break
    assert kills >= 2, "the tournament finished before it could be killed twice: raise --delay"

    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["matches"] == total

    # no lost and no duplicated match, in the store and in the trajectory file
    ids = [r.match_id for r in read_jsonl(jsonl)]
    assert len(ids) == total and not [m for m, c in Counter(ids).items() if c > 1]
    with sqlite3.connect(db) as conn:
        stored = [m for (m,) in conn.execute("SELECT match_id FROM matches")]
        sched = [m for (m,) in conn.execute("SELECT match_id FROM schedule")]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert (
        sorted(stored) == sorted(sched) == sorted(ids) == sorted(s.match_id for s in ref.schedule)
    )
    # and the same tournament as an uninterrupted run
    resumed = load_tournament(db)
    assert resumed.outcome.order == ref.outcome.order
    assert {m: r.outcome for m, r in resumed.results.items()} == {
        m: r.outcome for m, r in ref.results.items()
    }


def test_matches_in_the_jsonl_but_not_the_store_are_recovered_not_replayed(tmp_path):
    config = sim_config(4, "round_robin", 2)
    strengths = strengths_of(list(config.players))
    db = tmp_path / "t.db"
    jsonl = jsonl_beside(db)
    played = []

    def crash_after(limit):
        inner = bt_play_matches(strengths, str(jsonl), concurrency=1)

        def play(specs):
            for i, r in enumerate(inner(specs)):
                if i == limit:  # killed after the JSONL append, before the store insert
                    raise KeyboardInterrupt
                played.append(r.match_id)
                yield r

        return play

    with pytest.raises(KeyboardInterrupt):
        run_tournament(config, crash_after(5), db)
    assert jsonl_lines(jsonl) == 6 and Store(db).count() == (5, 12)
    with open(jsonl, "a") as f:  # and a torn line from a writer killed mid-write
        f.write('{"match_id": "RR|p00|p01|0.tic_tac_toe|0", "ga')
    result = run_tournament(config, bt_play_matches(strengths, str(jsonl), concurrency=1), db)
    assert result.recovered == 1 and result.played == 6
    ids = [r.match_id for r in read_jsonl(jsonl)]
    assert len(ids) == len(set(ids)) == 12
    again = run_tournament(config, None, db)  # finished: nothing to play, no agents needed
    assert again.played == 0 and again.recovered == 0 and len(again.results) == 12


def test_resume_with_another_config_is_refused(tmp_path):
    config = sim_config(4, "round_robin")
    strengths = strengths_of(list(config.players))
    db = tmp_path / "t.db"
    run_tournament(config, bt_play_matches(strengths, str(jsonl_beside(db))), db)
    other = sim_config(4, "round_robin", k=2)
    with pytest.raises(ValueError, match="different config .*games_per_pairing"):
        run_tournament(other, bt_play_matches(strengths, str(jsonl_beside(db))), db)
    # how matches are played (arena) and rated (rating) may change: same matches, new ratings
    relaxed = sim_config(4, "round_robin")
    relaxed.arena = {"concurrency": 2}
    relaxed.rating.reference = "p02"
    result = run_tournament(relaxed, None, db)
    assert result.played == 0 and result.ratings["p02"].elo == pytest.approx(1000.0)


def test_a_player_whose_checkpoint_moved_on_is_refused_once_matches_are_stored(tmp_path):
    config = sim_config(4, "round_robin")
    db = tmp_path / "t.db"
    with Store(db) as store:  # nothing stored yet: a new pin is taken
        store.pin_checkpoints({"p00": "run/checkpoints/step_1 (step 1)"})
        store.pin_checkpoints({"p00": "run/checkpoints/step_2 (step 2)"})
    run_tournament(
        config, bt_play_matches(strengths_of(list(config.players)), str(jsonl_beside(db))), db
    )
    with Store(db) as store:
        assert json.loads(store.meta("checkpoints")) == {
            p: None for p in config.players
        }  # bots play no checkpoint
        store.pin_checkpoints({p: None for p in config.players})  # unchanged: resumes
        with pytest.raises(
            ValueError, match="holds matches of p00 = None; it now plays run/x \\(step 3\\)"
        ):
            store.pin_checkpoints({"p00": "run/x (step 3)"})


def test_a_finished_tournament_loads_wherever_its_checkpoints_are_found_or_not(tmp_path):
    """Loading stored results plays nothing: a pinned checkpoint that this process cannot find
    (a relative run folder read from another directory) is no reason to refuse; playing is."""
    config = sim_config(4, "round_robin")
    db = tmp_path / "t.db"
    play = bt_play_matches(strengths_of(list(config.players)), str(jsonl_beside(db)))
    played = run_tournament(config, play, db).results
    pinned = {p: None for p in config.players} | {"p00": "/elsewhere/step_1 (step 1)"}
    with Store(db) as store:
        store.set_meta("checkpoints", json.dumps(pinned))
    assert load_tournament(db).results.keys() == played.keys()
    with pytest.raises(ValueError, match="holds matches of p00 = /elsewhere/step_1"):
        run_tournament(config, play, db)


def test_players_reordered_is_another_tournament(tmp_path):
    config, strengths, db = _interrupted_round_robin(tmp_path, 2)
    reordered = sim_config(4, "round_robin")
    reordered.players = dict(reversed(list(config.players.items())))
    with pytest.raises(ValueError, match="differs in: the order of the players"):
        run_tournament(reordered, bt_play_matches(strengths, str(jsonl_beside(db))), db)
    assert Store(db).count() == (2, 6)  # nothing scheduled or played for the refused config
    resumed = run_tournament(config, bt_play_matches(strengths, str(jsonl_beside(db))), db)
    assert resumed.played + resumed.recovered == 4 and len(resumed.results) == 6


def test_a_config_that_failed_before_any_match_can_be_corrected(tmp_path):
    config = sim_config(4, "round_robin")
    strengths = strengths_of(list(config.players))
    db = tmp_path / "t.db"
    jsonl = jsonl_beside(db)

    def broken(specs):
        raise ValueError("bad agent")
        yield

    with pytest.raises(ValueError, match="bad agent"):
        run_tournament(config, broken, db)
    jsonl.write_text("")  # a trajectory file from the failed run
    fixed = sim_config(4, "round_robin", k=2)
    result = run_tournament(fixed, bt_play_matches(strengths, str(jsonl)), db)
    assert result.played == 12 and json.loads(Store(db).meta("config"))["games_per_pairing"] == 2
    assert len(list(tmp_path.glob("t.jsonl.replaced-*"))) == 1


def test_a_store_from_before_openings_resumes(tmp_path):
    config, strengths, db = _interrupted_round_robin(tmp_path, 3)
    assert '"opening"' not in Store(db).meta("config")  # configs without openings store no such key
    with sqlite3.connect(db) as conn:  # the schedule table as it was before the column existed
        conn.execute("ALTER TABLE schedule DROP COLUMN opening")
    result = run_tournament(config, bt_play_matches(strengths, str(jsonl_beside(db))), db)
    assert result.played + result.recovered == 3 and len(result.results) == 6
    assert all(s.opening == 0 for s in result.schedule)


def test_seeds_from_an_earlier_tournaments_ratings(tmp_path):
    from tournaments.config import load_config

    first = sim_config(6, "round_robin", 2)
    strengths = strengths_of(list(first.players))
    db = tmp_path / "first.db"
    done = run_tournament(first, bt_play_matches(strengths, str(jsonl_beside(db))), db)
    players = {p: spec for p, spec in list(first.players.items())[1:]}  # one player dropped
    players["newcomer"] = dict(players["p01"])
    spec = {
        "name": "second",
        "format": "single_elimination",
        "players": players,
        "games": ["tic_tac_toe"],
        "format_options": {"seeding": "ratings", "ratings": str(db)},
    }
    second = load_config(spec, check_games=False)
    prior = second.format_options["ratings"]
    assert set(prior) == set(players) - {"newcomer"}  # the dropped player's rating is left out
    for p in prior:
        assert prior[p] == pytest.approx(done.ratings[p].elo)
    result = run_tournament(
        second,
        bt_play_matches({**strengths, "newcomer": 0.0}, str(tmp_path / "second.jsonl")),
        tmp_path / "second.db",
    )
    seeds = {p: st["seed"] for p, st in result.outcome.stats.items()}
    assert sorted(prior, key=lambda p: seeds[p]) == sorted(
        prior, key=lambda p: -prior[p]
    ) and seeds["newcomer"] == len(players)
    with pytest.raises(ValueError, match="no tournament database at"):
        load_config(
            {
                **spec,
                "format_options": {"seeding": "ratings", "ratings": str(tmp_path / "nope.db")},
            },
            check_games=False,
        )
    strangers = {"x": players["p01"], "y": players["p02"]}
    with pytest.raises(ValueError, match="rated none of these players"):
        load_config({**spec, "players": strangers}, check_games=False)


def _interrupted_round_robin(tmp_path, stored: int):
    """A 4-player round robin in tmp_path/t.db, interrupted after `stored` stored matches."""
    config = sim_config(4, "round_robin")
    strengths = strengths_of(list(config.players))
    db = tmp_path / "t.db"
    with pytest.raises(KeyboardInterrupt):
        run_tournament(
            config, _interrupt_after(bt_play_matches(strengths, str(jsonl_beside(db))), stored), db
        )
    return config, strengths, db


def _interrupt_after(play, limit):
    def wrapped(specs):
        for i, r in enumerate(play(specs)):
            if i == limit:
                raise KeyboardInterrupt
            yield r

    return wrapped


def test_unfinished_tournament_cannot_be_loaded_and_second_runner_is_locked(tmp_path):
    config = sim_config(4, "round_robin")
    db = tmp_path / "t.db"
    with Store(db) as first:
        first.lock()
        with pytest.raises(RuntimeError, match="being run by another process"):
            run_tournament(config, None, db)
    with pytest.raises(RuntimeError, match="not finished"):
        run_tournament(config, None, db)
    with pytest.raises(ValueError, match="no tournament database"):
        load_tournament(tmp_path / "missing.db")


def test_store_rejects_bad_results(tmp_path):
    from tournaments.store import MatchResult, MatchSpec

    with Store(tmp_path / "s.db") as store:
        spec = MatchSpec("m1", "tic_tac_toe", {}, 7, ["a", "b"])
        store.add_schedule([spec])
        store.add_schedule([spec])  # idempotent
        with pytest.raises(RuntimeError, match="scheduled differently"):
            store.add_schedule([MatchSpec("m1", "tic_tac_toe", {}, 8, ["a", "b"])])
        with pytest.raises(ValueError, match="unscheduled"):
            store.add_result(MatchResult("m2", {"a": 1, "b": -1}, {"a": "win", "b": "loss"}))
        with pytest.raises(ValueError, match="between"):
            store.add_result(MatchResult("m1", {"a": 1, "c": -1}, {"a": "win", "c": "loss"}))
        store.add_result(MatchResult.from_record(bt_record(spec, {"a": 0.0, "b": 0.0})))
        with pytest.raises(ValueError, match="already stored"):
            store.add_result(MatchResult.from_record(bt_record(spec, {"a": 0.0, "b": 0.0})))
        assert store.count() == (1, 1)
        assert os.path.exists(str(tmp_path / "s.db") + "-wal")


def _rows(db: Path) -> tuple:
    with sqlite3.connect(db) as conn:
        return tuple(
            tuple(conn.execute(f"SELECT * FROM {t} ORDER BY rowid"))
            for t in ("meta", "players", "schedule", "matches")
        )


@pytest.mark.parametrize(
    "fmt,n,k", [("round_robin", 6, 2), ("swiss", 7, 2), ("double_elimination", 6, 3)]
)
def test_a_deleted_store_is_rebuilt_from_the_jsonl_to_the_same_results(tmp_path, fmt, n, k):
    ref = reference(tmp_path, fmt, n, k)
    db = tmp_path / f"ref-{fmt}.db"
    jsonl = jsonl_beside(db)
    lines, before = jsonl_lines(jsonl), _rows(db)
    for f in tmp_path.glob(f"ref-{fmt}.db*"):
        f.unlink()
    replay = bt_play_matches(strengths_of(list(ref.config.players)), str(jsonl))
    rebuilt = run_tournament(ref.config, replay, db)
    assert rebuilt.played == 0 and rebuilt.recovered == len(ref.schedule)  # no match played twice
    assert jsonl_lines(jsonl) == lines
    assert _rows(db) == before  # the same store, row for row
    assert rebuilt.outcome.order == ref.outcome.order and rebuilt.results == ref.results
    assert {p: r.elo for p, r in rebuilt.ratings.items()} == {
        p: r.elo for p, r in ref.ratings.items()
    }


def test_a_jsonl_of_another_config_is_not_taken_for_this_one(tmp_path):
    config, strengths, db = _interrupted_round_robin(tmp_path, 3)
    for f in tmp_path.glob("t.db*"):
        f.unlink()
    other = sim_config(4, "round_robin", seed=5)  # same match ids, other seeds
    with pytest.raises(
        ValueError, match="t.jsonl holds match .* played as tic_tac_toe seed .*another config"
    ):
        run_tournament(other, bt_play_matches(strengths, str(jsonl_beside(db))), db)


def test_junk_lines_in_the_jsonl_are_set_aside_not_a_lockout(tmp_path, capsys):
    config, strengths, db = _interrupted_round_robin(tmp_path, 2)
    jsonl = jsonl_beside(db)
    good = jsonl.read_bytes().splitlines(keepends=True)
    jsonl.write_bytes(
        good[0] + b"\x00\xffjunk in the middle\n" + b"".join(good[1:]) + b'{"not": "a match"}\n'
    )
    result = run_tournament(config, bt_play_matches(strengths, str(jsonl)), db)
    assert result.played + result.recovered == 4 and len(result.results) == 6
    (aside,) = tmp_path.glob("t.jsonl.corrupt-*")
    assert aside.read_bytes() == b"\x00\xffjunk in the middle\n" + b'{"not": "a match"}\n'
    assert (
        f"2 unreadable line(s) (2, {len(good) + 2}) set aside in {aside}" in capsys.readouterr().err
    )
    ids = [
        r.match_id for r in read_jsonl(jsonl)
    ]  # a clean log: every later run and report reads it
    assert sorted(ids) == sorted(result.results)
    assert load_tournament(db).outcome.order == result.outcome.order
    assert len(list(tmp_path.glob("t.jsonl.corrupt-*"))) == 1  # nothing more to set aside


def test_max_turns_is_part_of_the_config_and_defaults_written_out_are_not_a_change(tmp_path):
    config, strengths, db = _interrupted_round_robin(tmp_path, 2)
    play = bt_play_matches(strengths, str(jsonl_beside(db)))
    shorter = sim_config(4, "round_robin")
    shorter.arena = {"max_turns": 5}  # changes how matches end
    with pytest.raises(ValueError, match=r"differs in: arena\.max_turns\)"):
        run_tournament(shorter, play, db)
    explicit = sim_config(4, "round_robin")
    explicit.arena = {"max_turns": 2000, "concurrency": 3}  # the default, and the free option
    assert len(run_tournament(explicit, play, db).results) == 6

    swiss = sim_config(5, "swiss", 1)
    sdb = tmp_path / "s.db"
    with pytest.raises(KeyboardInterrupt):
        run_tournament(
            swiss,
            _interrupt_after(
                bt_play_matches(strengths_of(list(swiss.players)), str(jsonl_beside(sdb))), 1
            ),
            sdb,
        )
    written = sim_config(
        5, "swiss", 1, rounds=3, seeding="random", seed=0
    )  # ceil(log2 5) = 3: the defaults, written out
    result = run_tournament(
        written, bt_play_matches(strengths_of(list(swiss.players)), str(jsonl_beside(sdb))), sdb
    )
    assert len(result.results) == 6
    with pytest.raises(ValueError, match=r"differs in: format_options\.rounds\)"):
        run_tournament(sim_config(5, "swiss", 1, rounds=4), None, sdb)


def test_the_standing_so_far_is_read_without_writing(tmp_path):
    from tournaments.run import tournament_so_far

    config, strengths, db = _interrupted_round_robin(tmp_path, 4)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with Store(db) as runner:
        runner.lock()  # another process runs it
        assert Store.running(db)
        so_far = tournament_so_far(config, db)
    assert not so_far.finished and len(so_far.results) == 4 and len(so_far.schedule) == 6
    assert so_far.outcome.order == sorted(config.players, key=lambda p: -so_far.ratings[p].elo)
    assert sum(s["points"] for s in so_far.outcome.stats.values()) == 4
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    done = run_tournament(config, bt_play_matches(strengths, str(jsonl_beside(db))), db)
    assert not Store.running(db)
    final = tournament_so_far(config, db)
    assert (
        final.finished
        and final.outcome.order == done.outcome.order
        and final.results == done.results
    )


def test_a_finished_tournament_loads_from_its_db_with_players_out_of_alphabetical_order(tmp_path):
    config = sim_config(3, "round_robin")
    config.players = {p: config.players[p] for p in ("p02", "p00", "p01")}
    db = tmp_path / "t.db"
    done = run_tournament(
        config, bt_play_matches(strengths_of(list(config.players)), str(jsonl_beside(db))), db
    )
    loaded = load_tournament(db)
    assert list(loaded.config.players) == ["p02", "p00", "p01"] and loaded.played == 0
    assert {p: r.elo for p, r in loaded.ratings.items()} == pytest.approx(
        {p: r.elo for p, r in done.ratings.items()}
    )


def test_an_agent_that_raises_mid_tournament_leaves_its_finished_matches_stored(tmp_path):
    """A player's backend fails on its 7th call: the run ends with one error naming it, the
    matches finished by then are in the JSONL and the store alike, and the same run with a
    working player finishes the tournament as if it never stopped."""
    from agents import make_agent
    from arena.runner import AgentFailed
    from tournaments.config import load_config
    from tournaments.matches import arena_play_matches

    class FailsOnCall:
        def __init__(self, n):
            self.inner, self.name, self.calls, self.n = make_agent("random", "c"), "c", 0, n

        def act(self, turns):
            self.calls += 1
            if self.calls >= self.n:
                raise TimeoutError("the model server did not answer")
            return self.inner.act(turns)

    config = load_config(
        {
            "name": "fails",
            "format": "round_robin",
            "players": {"a": "random", "b": "random", "c": "random"},
            "games": ["tic_tac_toe"],
            "games_per_pairing": 4,
        }
    )

    def run(db, c):
        agents = {"a": make_agent("random", "a"), "b": make_agent("random", "b"), "c": c}
        return run_tournament(config, arena_play_matches(agents, jsonl_beside(db), 16, 100), db)

    db = tmp_path / "t.db"
    with pytest.raises(AgentFailed, match="agent 'c' .*TimeoutError: the model server"):
        run(db, FailsOnCall(7))
    logged = sorted(r.match_id for r in read_jsonl(jsonl_beside(db)))
    with Store(db) as store:
        assert sorted(store.results()) == logged and 0 < len(logged) < 12
    resumed = run(db, FailsOnCall(10**9))
    whole = run(tmp_path / "whole.db", FailsOnCall(10**9))
    assert resumed.played == 12 - len(logged) and len(resumed.results) == 12
    assert {m: r.scores for m, r in resumed.results.items()} == {
        m: r.scores for m, r in whole.results.items()
    }
