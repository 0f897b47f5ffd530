"""`arena web`'s endpoints through Starlette's TestClient, on a real tournament store played by
bots: the leaderboard (the report's numbers, refitted only when a match lands), the paged
match list, the match viewer's boards, the training curves, the API key and paths that
would leave the runs folder."""

import json
import os
import shutil
import sqlite3

from starlette.testclient import TestClient

from cli.main import main as arena_main
from core.records import read_jsonl
from tests.web.conftest import DB, MATCHES
from tournaments.report import leaderboard_json
from tournaments.run import load_tournament
from tournaments.store import MatchResult, Store
from web import standings as standings_module
from web.app import create_app
from web.replay import replay
from web.standings import Standings


def counted_results(db) -> dict:
    """player -> [wins, draws, losses], counted straight from the store's SQLite rows."""
    out: dict = {}
    with sqlite3.connect(db) as conn:
        for (outcome,) in conn.execute("SELECT outcome FROM matches"):
            for player, o in json.loads(outcome).items():
                out.setdefault(player, [0, 0, 0])[("win", "draw", "loss").index(o)] += 1
    return out


def test_leaderboard_json_has_the_reports_numbers(runs):
    data = TestClient(create_app(runs)).get("/api/leaderboard", params={"db": DB}).json()
    assert data["matches"] == MATCHES and data["finished"] and not data["running"]
    report = leaderboard_json(load_tournament(runs / DB))
    assert data["players"] == report["players"]  # one code path: the HTML report's rows
    counted = counted_results(runs / DB)
    for row in data["players"]:
        assert [row["wins"], row["draws"], row["losses"]] == counted[row["player"]]
        assert 1 <= row["rank_lo"] <= row["rank_hi"] <= 3  # the rank range the CIs allow
    assert {r["player"] for r in data["players"]} == {"random", "random2", "mcts"}


def test_leaderboard_is_refitted_only_when_a_match_lands(runs, monkeypatch):
    db = runs / DB
    with sqlite3.connect(db) as conn:  # take the last stored match out, to store it again
        mid, scores, outcome, traj, finished = conn.execute(
            "SELECT match_id, scores, outcome, trajectory, finished_at FROM matches ORDER BY rowid DESC"
        ).fetchone()
        conn.execute("DELETE FROM matches WHERE match_id = ?", (mid,))
    fits = []
    real = standings_module.fit
    monkeypatch.setattr(standings_module, "fit", lambda d: fits.append(d) or real(d))
    board = Standings()
    first = board.get(db)
    assert first["matches"] == MATCHES - 1 and not first["finished"]
    assert board.get(db)["matches"] == MATCHES - 1 and len(fits) == 1  # same count: no refit
    with Store(db) as store:
        store.add_result(
            MatchResult(mid, json.loads(scores), json.loads(outcome), traj, None, finished)
        )
    after = board.get(db)
    assert len(fits) == 2 and after["matches"] == MATCHES
    games = {r["player"]: r["games"] for r in after["players"]}
    before = {r["player"]: r["games"] for r in first["players"]}
    assert {p: games[p] - before[p] for p in games} == {
        p: int(p in json.loads(outcome)) for p in games
    }


def test_an_unreadable_store_answers_with_the_last_standing(runs):
    db = runs / DB
    board = Standings()
    assert board.get(db)["matches"] == MATCHES
    for suffix in ("-wal", "-shm"):
        if os.path.exists(f"{db}{suffix}"):
            os.remove(f"{db}{suffix}")
    db.write_bytes(b"not a database, a writer's half-copied file" * 100)
    stale = board.get(db)
    assert stale["matches"] == MATCHES and "stale" in stale
    assert "error" in Standings().get(db)  # no standing before: the reason alone


def test_matches_are_paged_newest_first_on_the_server(runs):
    client = TestClient(create_app(runs))
    with sqlite3.connect(runs / DB) as conn:
        newest_first = [
            m for (m,) in conn.execute("SELECT match_id FROM matches ORDER BY rowid DESC")
        ]
        games = dict(conn.execute("SELECT match_id, game FROM schedule"))
        seats = {m: json.loads(s) for m, s in conn.execute("SELECT match_id, seats FROM schedule")}
    pages = [
        client.get("/api/matches", params={"db": DB, "offset": k, "limit": 5}).json()
        for k in range(0, MATCHES, 5)
    ]
    assert [len(p["matches"]) for p in pages] == [5, 5, 5, 3]
    assert all(p["total"] == MATCHES for p in pages)
    assert [m["id"] for p in pages for m in p["matches"]] == newest_first
    by_game = client.get("/api/matches", params={"db": DB, "game": "connect_four"}).json()
    assert {m["id"] for m in by_game["matches"]} == {
        m for m, g in games.items() if g == "connect_four"
    }
    by_player = client.get("/api/matches", params={"db": DB, "player": "mcts"}).json()
    assert {m["id"] for m in by_player["matches"]} == {m for m, s in seats.items() if "mcts" in s}
    page = client.get("/tournament", params={"db": DB, "page": 1}).text
    assert page.count('class="replay"') == 0  # 18 matches: one page of 50
    assert client.get("/tournament", params={"db": DB}).text.count('class="replay"') == MATCHES


def board_by_hand(record) -> list[list[str]]:
    """The final board of a tic-tac-toe or connect-four record, from its actions alone."""
    marks = {"player_0": "X", "player_1": "O"}
    if record.game == "tic_tac_toe":
        cells = [""] * 9
        for t in record.turns:
            cells[t.action] = marks[t.player]
        return [cells[0:3], cells[3:6], cells[6:9]]
    grid = [[""] * 7 for _ in range(6)]
    for t in record.turns:
        row = max(r for r in range(6) if grid[r][t.action] == "")
        grid[row][t.action] = marks[t.player]
    return grid


def test_viewer_replays_the_boards_and_shows_each_turn(runs):
    client = TestClient(create_app(runs))
    records = list(read_jsonl((runs / DB).with_suffix(".jsonl")))
    for game in ("tic_tac_toe", "connect_four"):
        record = next(r for r in records if r.game == game)
        view = replay(record)
        assert view.turns[-1].board == board_by_hand(record)
        assert all(cell == "" for row in view.board for cell in row)
        page = client.get("/match", params={"db": DB, "id": record.match_id})
        assert page.status_code == 200
        assert page.text.count('<section class="turn') == len(record.turns)
    dilemma = next(r for r in records if r.game == "prisoners_dilemma")
    assert replay(dilemma).board is None
    got = client.get("/api/match", params={"db": DB, "id": dilemma.match_id}).json()
    assert got["match_id"] == dilemma.match_id and len(got["turns"]) == len(dilemma.turns)
    missing = client.get("/match", params={"db": DB, "id": "no such match"})
    assert missing.status_code == 404


def test_training_curves_put_several_runs_on_one_panel(tmp_path):
    for name, rewards in (("a", [0.1, 0.4]), ("b", [0.2, 0.3])):
        run = tmp_path / name
        run.mkdir()
        (run / "metrics.jsonl").write_text(
            "".join(
                json.dumps({"step": i + 1, "minutes": i, "reward": r}) + "\n"
                for i, r in enumerate(rewards)
            )
        )
        row = {
            "step": 0,
            "minutes": 0,
            "game": "tic_tac_toe",
            "opponent": "random",
            "games": 10,
            "non_losing": 0.7,
            "ci_low": 0.4,
            "ci_high": 0.9,
            "invalid_rate": 0.0,
        }
        (run / "eval.jsonl").write_text(json.dumps(row) + "\n" + '{"step": 1, "torn')
    client = TestClient(create_app(tmp_path))
    panels = client.get("/api/curves", params={"run": ["a", "b"]}).json()["panels"]
    reward = panels[0]
    assert reward["title"] == "reward"
    assert {s["label"]: [p[2] for p in s["points"]] for s in reward["series"]} == {
        "a": [0.1, 0.4],
        "b": [0.2, 0.3],
    }
    rate = next(p for p in panels if p["title"] == "tic_tac_toe vs random")
    assert [s["points"] for s in rate["series"]] == [
        [[0, 0, 0.7, 0.4, 0.9]]
    ] * 2  # the torn line skipped
    assert "a" in client.get("/runs").text


def test_api_key_guards_every_page_and_endpoint(runs):
    client = TestClient(create_app(runs, api_key="s3cret"), follow_redirects=False)
    assert client.get("/api/leaderboard", params={"db": DB}).status_code == 401
    assert client.get("/api/curves").status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert client.get("/api/leaderboard", params={"db": DB}, headers=wrong).status_code == 401
    right = {"Authorization": "Bearer s3cret"}
    assert client.get("/api/leaderboard", params={"db": DB}, headers=right).status_code == 200
    for path in ("/", "/static/style.css", f"/tournament?db={DB}"):
        r = client.get(path)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
    assert client.post("/login", data={"key": "nope", "next": "/"}).status_code == 401
    assert "s3cret" not in client.get("/login").text
    once = client.get("/", params={"key": "s3cret"})  # ?key= once: a cookie, the key dropped
    assert once.status_code == 303 and once.headers["location"] == "/"
    assert "s3cret" not in once.headers["set-cookie"]
    assert client.get("/").status_code == 200  # the cookie now
    fresh = TestClient(create_app(runs, api_key="s3cret"), follow_redirects=False)
    login = fresh.post("/login", data={"key": "s3cret", "next": "//evil.example/"})
    assert login.status_code == 303 and login.headers["location"] == "/"
    assert fresh.get("/api/leaderboard", params={"db": DB}).status_code == 200


def test_paths_that_leave_the_runs_folder_are_refused(runs, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(runs / DB, outside / "secret.db")  # a real store, readable if not refused
    (runs / "link").symlink_to(outside, target_is_directory=True)
    client = TestClient(create_app(runs))
    for path in (
        "../outside/secret.db",
        str(outside / "secret.db"),
        "link/secret.db",
        "web_test/../../outside/secret.db",
        "web_test/tournament.jsonl",
        "",
    ):
        assert client.get("/api/leaderboard", params={"db": path}).status_code == 404, path
        assert client.get("/tournament", params={"db": path}).status_code == 404, path
        assert client.get("/match", params={"db": path, "id": "x"}).status_code == 404, path
    assert client.get("/api/curves", params={"run": "../outside"}).status_code == 404
    assert client.get("/api/leaderboard?db=..%2Foutside%2Fsecret.db").status_code == 404
    assert "secret" not in client.get("/").text  # links out of the folder are not followed


def test_arena_web_refuses_a_missing_folder(tmp_path, capsys):
    assert arena_main(["web", str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_viewer_shows_a_players_own_view_reply_and_logprobs(runs):
    from core.records import Attempt, MatchRecord, TurnRecord, append_jsonl

    prompt = "You are X. Board: . . . <b>to move</b>"
    turn = TurnRecord(
        0,
        "player_0",
        "tiny",
        "4",
        4,
        messages=[{"role": "system", "content": "rules"}, {"role": "user", "content": prompt}],
        completion="4",
        logprobs=[-0.5, -1.0],
        attempts=[Attempt("nine", error="illegal: 9"), Attempt("4", logprobs=[-0.5, -1.0])],
        retries=1,
    )
    record = MatchRecord(
        "llm match", "tic_tac_toe", {}, 3, {"player_0": "tiny", "player_1": "random"}, [turn]
    )
    append_jsonl((runs / DB).with_suffix(".jsonl"), record)
    page = TestClient(create_app(runs)).get("/match", params={"db": DB, "id": "llm match"}).text
    assert "You are X. Board: . . . &lt;b&gt;to move&lt;/b&gt;" in page  # escaped, not markup
    assert "rejected: illegal: 9" in page and "1 retry" in page
    assert "2 tokens, sum -1.500, mean -0.750" in page
