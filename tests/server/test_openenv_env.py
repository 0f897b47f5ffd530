"""`arena env-serve`: every catalogue game as an OpenEnv environment, driven by OpenEnv's own
client (`openenv.core.GenericEnvClient`) over a real uvicorn server: seeds honoured, no history
across resets, many sessions at once, a killed client's session reclaimed, episodes recorded."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pytest
import uvicorn
import yaml
from openenv.core import GenericEnvClient
from websockets.exceptions import ConnectionClosed

import games
from cli.main import main as arena_main
from core.records import read_jsonl
from server.openenv_env import create_app


@contextmanager
def serving(app):
    """`app` on a real uvicorn server on a free local port, in a thread: its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def reply(obs: dict) -> str:
    """A fixed policy: a message at a free-text turn, else the first legal move."""
    return "Let us share fairly." if obs["free_text"] else f"[{obs['legal_moves'][0]}]"


def episode(client, seed: int) -> tuple[list[str], list[float]]:
    """One episode with the fixed policy: the observation texts and the rewards."""
    r = client.reset(seed=seed)
    texts, rewards = [r.observation["text"]], []
    while not r.done:
        r = client.step({"reply": reply(r.observation)})
        texts.append(r.observation["text"])
        rewards.append(r.reward)
    return texts, rewards


@pytest.mark.parametrize("name", games.names())
def test_every_catalogue_game_plays_through_openenvs_client(name, tmp_path):
    """An episode per game against random: the rewards sum to the return in its record (a
    reply the game rejects, such as a codewords clue that is not one word, forfeits)."""
    out = tmp_path / "episodes.jsonl"
    app = create_app(name, opponents="random", record=str(out), on_bad_reply="forfeit")
    with serving(app) as url:
        with GenericEnvClient(base_url=url).sync() as client:
            _, rewards = episode(client, seed=1)
            state = client.state()
    [record] = list(read_jsonl(out))
    seat = next(a for a, n in record.seats.items() if n == "gym")
    assert sum(rewards) == pytest.approx(record.returns[seat])
    assert state["game"] == name and state["seed"] == 1 and state["step_count"] == len(rewards)


def test_seeds_replay_and_no_history_crosses_a_reset():
    """Liar's dice against random: the same seed gives the same episode on two sessions and
    after other episodes on one; another seed gives another."""
    with serving(create_app("liars_dice", seat=1, opponents="random")) as url:
        with GenericEnvClient(base_url=url).sync() as a, GenericEnvClient(base_url=url).sync() as b:
            first = episode(a, seed=7)
            assert episode(b, seed=7) == first
            other = [episode(a, seed=s)[0][0] for s in (8, 9, 10)]
            assert episode(a, seed=7) == first  # after three other matches on the session
    assert any(text != first[0][0] for text in other)


def test_a_rejected_reply_is_retried_then_forfeits_when_asked():
    with serving(create_app("tic_tac_toe", opponents="random")) as url:
        with GenericEnvClient(base_url=url).sync() as client:
            before = client.reset(seed=2).observation
            r = client.step({"reply": "the middle, please"})
            assert r.observation["parse_error"] and not r.done and r.reward == 0
            assert r.observation["text"] == before["text"]
    with serving(create_app("tic_tac_toe", opponents="random", on_bad_reply="forfeit")) as url:
        with GenericEnvClient(base_url=url).sync() as client:
            client.reset(seed=2)
            r = client.step({"reply": "the middle, please"})
            assert r.done and r.reward == -1.0


def test_many_sessions_at_once_and_the_cap():
    """Four sessions play at once on a server of four; a fifth is refused while they hold."""
    app = create_app("openspiel:kuhn_poker", max_sessions=4, opponents="cfr", players=3)
    results = {}
    with serving(app) as url:
        clients = [GenericEnvClient(base_url=url).sync() for _ in range(4)]
        for c in clients:
            c.connect()
        # The server answers CAPACITY_REACHED and closes: the client sees either, by timing.
        with pytest.raises((ConnectionClosed, ConnectionError, RuntimeError)) as refused:
            with GenericEnvClient(base_url=url).sync() as extra:
                extra.reset(seed=0)
        assert not isinstance(refused.value, RuntimeError) or "CAPACITY" in str(refused.value)

        def run(i):
            results[i] = [episode(clients[i], seed=s)[1] for s in range(5)]

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for c in clients:
            c.close()
    assert len(results) == 4 and all(r == results[0] for r in results.values())  # seeded alike


CLIENT = """
import sys, time
from openenv.core import GenericEnvClient
from websockets.exceptions import ConnectionClosed
c = GenericEnvClient(base_url=sys.argv[1]).sync()
c.connect(); c.reset(seed=0)
print("ready", flush=True)
time.sleep(600)
"""


def test_a_killed_clients_session_is_reclaimed():
    """A server of one session: a client killed with -9 mid-episode frees it for the next."""
    with serving(create_app("tic_tac_toe", max_sessions=1, opponents="random")) as url:
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        proc = subprocess.Popen(
            [sys.executable, "-c", CLIENT, url], stdout=subprocess.PIPE, env=env
        )
        assert proc.stdout.readline().strip() == b"ready"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 20
        while True:
            try:
                with GenericEnvClient(base_url=url).sync() as client:
                    assert len(episode(client, seed=0)[1]) >= 3
                break
            except Exception:
                assert time.monotonic() < deadline, "the killed client's session was not freed"
                time.sleep(0.2)


def test_env_serve_refuses_a_bad_setup_in_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "env-serve", "tic_tac_toe", "--opponents", "cfr"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode != 0 and "cfr solves kuhn_poker" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_client_holds_a_whole_team_of_codewords(tmp_path):
    """Red's two seats in one session (a step acts for the red seat to move): every step's
    `turn` is a red seat, and the rewards add up to red's recorded return."""
    out = tmp_path / "m.jsonl"
    app = create_app("codewords", seat=[0, 1], opponents="codewords_tags", record=str(out))
    with serving(app) as url, GenericEnvClient(base_url=url).sync() as client:
        r = client.reset(seed=4)
        assert client.state()["seats"] == ["player_0", "player_1"]
        turns, rewards = [], []
        while not r.done:  # a clue no grid word is part of, then the first word each time
            turns.append(r.observation["turn"])
            free = r.observation["free_text"]
            r = client.step({"reply": "xqzv 1" if free else f"[{r.observation['legal_moves'][0]}]"})
            assert r.observation["parse_error"] is None
            rewards.append(r.reward)
    (record,) = read_jsonl(out)
    assert set(turns) == {"player_0", "player_1"}
    assert record.seats["player_0"] == "gym" and record.seats["player_1"] == "gym#2"
    assert sum(rewards) == pytest.approx(record.returns["player_0"])


TOURNAMENT = {
    "name": "env into",
    "format": "round_robin",
    "players": {"random": "random", "mcts": {"by_game": {"tic_tac_toe": "mcts:10"}}},
    "games": ["tic_tac_toe"],
    "games_per_pairing": 2,
}


def test_a_client_plays_into_a_tournament_and_is_ranked(tmp_path, capsys):
    """Four episodes as `grpo-40` against the tournament's `mcts` (a by_game player): they go
    to the tournament's people file under the players' names, and `arena tournament
    --report-only` ranks grpo-40 with the W/D/L its records give."""
    config, db = tmp_path / "t.yaml", tmp_path / "t" / "tournament.db"
    config.write_text(yaml.safe_dump(TOURNAMENT))
    assert arena_main(["tournament", str(config), "--db", str(db)]) == 0
    app = create_app("tic_tac_toe", tournament=str(db), player_name="grpo-40", opponents="mcts")
    with serving(app) as url, GenericEnvClient(base_url=url).sync() as client:
        for seed in range(4):
            episode(client, seed)
    records = list(read_jsonl(db.with_suffix(".people.jsonl")))
    assert [sorted(r.seats.values()) for r in records] == [["grpo-40", "mcts"]] * 4
    wdl = {"win": 0, "draw": 0, "loss": 0}
    for r in records:
        wdl[r.outcome["player_0"]] += 1
    capsys.readouterr()
    assert arena_main(["tournament", str(config), "--db", str(db), "--report-only"]) == 0
    assert "4 game(s) played into it" in capsys.readouterr().out
    rows = {r["player"]: r for r in json.loads(db.with_suffix(".json").read_text())["players"]}
    assert [rows["grpo-40"][k] for k in ("wins", "draws", "losses")] == list(wdl.values())


@pytest.mark.parametrize(
    "options, says",
    [({"opponents": "cfr"}, "must be players of"), ({"player_name": "mcts"}, "not a player's"),
     ({"rounds": 3}, "not rounds"), ({"seat": [0, 1]}, "not several seats")],
)  # fmt: skip
def test_a_bad_game_into_a_tournament_fails_in_one_line(tmp_path, options, says):
    config, db = tmp_path / "t.yaml", tmp_path / "t" / "tournament.db"
    config.write_text(yaml.safe_dump(TOURNAMENT))
    assert arena_main(["tournament", str(config), "--db", str(db)]) == 0
    with pytest.raises(ValueError, match=says) as e:
        create_app(
            "tic_tac_toe",
            tournament=str(db),
            **{"player_name": "me", "opponents": "mcts", **options},
        )
    assert "\n" not in str(e.value)
