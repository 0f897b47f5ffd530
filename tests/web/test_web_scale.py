"""A 10,000-match tournament (simulated Bradley-Terry players, `tournaments.sim`) in `arena
web`: its first leaderboard (the one fit), its pages of matches and a match load in under a
second each."""

import tempfile
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tournaments.run import run_tournament
from tournaments.sim import bt_play_matches, sim_config, strengths_of
from tournaments.store import jsonl_beside
from web.app import create_app


@pytest.mark.slow
def test_a_10000_match_tournament_loads_in_under_a_second():
    shm = Path("/dev/shm")  # the store fsyncs each match: a memory folder keeps this test short
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
        db = Path(tmp) / "big" / "tournament.db"
        db.parent.mkdir()
        config = sim_config(10, "round_robin", k=222)  # 45 pairings x 222 = 9,990 matches
        play = bt_play_matches(
            strengths_of(list(config.players)), str(jsonl_beside(db)), concurrency=64
        )
        run_tournament(config, play, db)
        client = TestClient(create_app(tmp))

        def timed(path: str, **params):
            start = time.perf_counter()
            response = client.get(path, params={"db": "big/tournament.db", **params})
            assert response.status_code == 200
            return time.perf_counter() - start, response

        seconds, first = timed("/api/leaderboard")
        assert first.json()["matches"] == 9990 and seconds < 1.0
        assert timed("/api/leaderboard")[0] < 0.1  # no refit: the count is the same
        assert timed("/tournament")[0] < 1.0
        assert timed("/tournament", page=150)[0] < 1.0
        seconds, page = timed("/api/matches", offset=9000, limit=50)
        assert seconds < 1.0 and len(page.json()["matches"]) == 50
        assert timed("/match", id=page.json()["matches"][-1]["id"])[0] < 1.0
