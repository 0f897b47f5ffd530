"""Play in the browser through Starlette's TestClient: a person's seat against real agents
(random, cfr, werewolf_heuristic) on real games; illegal moves, messages, what a seat's
page may show, the record of a finished game, the bound on games in play and the key."""

import json
import time

import pyspiel
import pytest
from starlette.testclient import TestClient

import games
from core.records import read_jsonl
from web.app import create_app

VIEW_KEYS = {"rules", "state", "history", "legal_moves", "free_text", "max_chars"}


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(tmp_path)) as c:
        yield c


def new(client, **setup):
    r = client.post("/api/play/new", json=setup)
    assert r.status_code == 200, r.text
    return r.json()


def move(client, state, **what):
    return client.post("/api/play/move", json={"id": state["id"], **what})


def test_tic_tac_toe_against_random_illegal_move_and_record(client, tmp_path):
    s = new(client, game="tic_tac_toe", seat=0, opponents=["random"], seed=3)
    assert s["your_turn"] and s["view"]["legal_moves"] == [str(c) for c in range(9)]
    played = []
    while not s["over"]:
        legal = s["view"]["legal_moves"]
        taken = next(str(c) for c in range(9) if str(c) not in legal) if len(legal) < 9 else None
        for bad in ("9", "x", taken):  # off the board, not a move, an occupied cell
            if bad is None:
                continue
            r = move(client, s, move=bad)
            assert r.status_code == 400 and "not a legal move" in r.json()["error"]
            assert client.get("/api/play/state", params={"id": s["id"]}).json() == s  # unchanged
        played.append(legal[0])
        s = move(client, s, move=legal[0]).json()
    assert move(client, s, move="0").status_code == 400  # the game is over
    [record] = read_jsonl(tmp_path / "web-play" / "matches.jsonl")
    assert record.match_id == s["match_id"] and record.seats == {
        "player_0": "human",
        "player_1": "random",
    }
    assert [t.move for t in record.turns if t.agent == "human"] == played
    # the result, replayed independently on OpenSpiel's tic-tac-toe
    state = pyspiel.load_game("tic_tac_toe").new_initial_state()
    for t in record.turns:
        state.apply_action(int(t.action))
    assert state.is_terminal()
    assert record.returns == {"player_0": state.returns()[0], "player_1": state.returns()[1]}
    assert s["return"] == state.returns()[0]
    viewer = client.get("/play/match", params={"id": record.match_id})
    assert viewer.status_code == 200 and "human" in viewer.text
    assert record.match_id in client.get("/play").text  # listed among the finished games


def test_a_kuhn_hand_against_cfr(client, tmp_path):
    s = new(client, game="kuhn_poker", seat=1, opponents=["cfr"], seed=7)
    while not s["over"]:
        assert set(s["view"]["legal_moves"]) == {"Pass", "Bet"}
        s = move(client, s, move="Bet").json()
    [record] = read_jsonl(tmp_path / "web-play" / "matches.jsonl")
    assert record.seats == {"player_0": "cfr", "player_1": "human"}
    assert {t.move for t in record.turns if t.agent == "human"} == {"Bet"}
    assert sum(record.returns.values()) == 0 and abs(record.returns["player_1"]) in (1, 2)
    assert s["outcome"] == ("win" if record.returns["player_1"] > 0 else "loss")


def test_a_message_turn_through_the_text_box(client):
    s = new(client, game="trust_and_split", seat=0, opponents=["random"], seed=1)
    view = s["view"]
    assert view["free_text"] and view["legal_moves"] == [] and view["max_chars"] > 0
    assert move(client, s, text="x" * (view["max_chars"] + 1)).status_code == 400
    assert move(client, s, text="   ").status_code == 400
    assert move(client, s, move="Pass").status_code == 400  # a button's move is no message
    s = move(client, s, text="Let us split the coins evenly.").json()
    assert s["moves_played"] == 1
    assert any("Let us split the coins evenly." in line for line in s["view"]["history"])
    page = client.get("/play/game", params={"id": s["id"]}).text
    if s["your_turn"] and s["view"]["free_text"]:
        assert f'maxlength="{s["view"]["max_chars"]}"' in page


def kuhn_deal(seed: int) -> list[int]:
    """The two private cards (0 J, 1 Q, 2 K) of the env's deal with `seed`, read off OpenSpiel."""
    env = games.make("kuhn_poker")
    env.reset(seed=seed)
    return list(env.state.history()[:2])


def _page_without_ids(client, state) -> str:
    html = client.get("/play/game", params={"id": state["id"]}).text
    return html.replace(state["id"], "ID")


def test_kuhn_seat_never_sees_the_opponents_card_before_showdown(client):
    deals = {seed: kuhn_deal(seed) for seed in range(40)}
    a = next(s for s, d in deals.items() if d[0] == 1 and d[1] == 0)  # mine Q, theirs J
    b = next(s for s, d in deals.items() if d[0] == 1 and d[1] == 2)  # mine Q, theirs K
    sa = new(client, game="kuhn_poker", seat=0, opponents=["cfr"], seed=a)
    sb = new(client, game="kuhn_poker", seat=0, opponents=["cfr"], seed=b)
    assert set(sa) <= {"id", "game", "seat", "opponents", "your_turn", "over", "moves_played"} | {
        "error",
        "view",
    }
    assert set(sa["view"]) == VIEW_KEYS
    # what the seat is shown depends on its own card only: the same with the J or the K opposite
    assert {**sa, "id": ""} == {**sb, "id": ""}
    assert _page_without_ids(client, sa) == _page_without_ids(client, sb)
    # after a Pass the cfr opponent (holding the J or the K) checks to a showdown or bets; where
    # it did the same with either card, the seat's page is still the same
    sa2, sb2 = (move(client, s, move="Pass").json() for s in (sa, sb))
    if not sa2["over"] and not sb2["over"]:
        assert sa2["view"] == sb2["view"]


def test_werewolf_villager_never_sees_the_others_roles(client):
    seed = next(s for s in range(20) if roles(s)["player_0"] == "villager")
    others = {p: r for p, r in roles(seed).items() if p != "player_0"}
    s = new(client, game="werewolf", seat=0, opponents=["werewolf_heuristic"], seed=seed)
    pages = []
    for _ in range(4):
        pages += [json.dumps(s), client.get("/play/game", params={"id": s["id"]}).text]
        if s["over"] or not s["your_turn"]:
            break
        v = s["view"]
        what = {"text": "I am a villager."} if v["free_text"] else {"move": v["legal_moves"][0]}
        s = move(client, s, **what).json()
    assert "You are player_0, the villager" in pages[0]  # its own role, in the game's words
    for page in pages:  # others' roles, in the words a seat is told its own (or a wolf its mates)
        assert "The werewolves:" not in page and '"roles"' not in page
        for p, r in others.items():
            assert f"{p}, the {r}" not in page


def roles(seed: int) -> dict:
    env = games.make("werewolf")
    env.reset(seed=seed)
    return dict(env.unwrapped.roles)


def test_games_in_play_are_bounded_and_idle_games_dropped(tmp_path):
    with TestClient(create_app(tmp_path, max_games=2, idle_s=0.5)) as c:
        first = new(c, game="tic_tac_toe", seat=0, opponents=["random"])
        new(c, game="tic_tac_toe", seat=1, opponents=["random"])
        r = c.post(
            "/api/play/new", json={"game": "tic_tac_toe", "seat": 0, "opponents": ["random"]}
        )
        assert r.status_code == 429 and "2 games" in r.json()["error"]
        time.sleep(0.7)  # both idle past idle_s: dropped
        new(c, game="tic_tac_toe", seat=0, opponents=["random"])
        assert c.get("/api/play/state", params={"id": first["id"]}).status_code == 404
    assert not (tmp_path / "web-play" / "matches.jsonl").exists()  # no game was finished


@pytest.mark.parametrize(
    "setup, says",
    [
        ({"game": "chess", "seat": 0, "opponents": ["random"]}, "game must be one of"),
        (
            {"game": "tic_tac_toe", "seat": 2, "opponents": ["random"]},
            "seat must be between 0 and 1",
        ),
        ({"game": "tic_tac_toe", "seat": 0, "opponents": ["randmo"]}, "did you mean random"),
        ({"game": "tic_tac_toe", "seat": 0, "opponents": ["cfr"]}, "cfr"),
        ({"game": "tic_tac_toe", "seat": 0, "opponents": ["human"]}, "not human"),
        ({"game": "tic_tac_toe", "seat": "x", "opponents": ["random"]}, "whole numbers"),
    ],
)
def test_a_bad_setup_is_a_400_with_one_line(client, setup, says):
    r = client.post("/api/play/new", json=setup)
    assert r.status_code == 400 and says in r.json()["error"] and "\n" not in r.json()["error"]


def test_play_needs_the_api_key(tmp_path):
    with TestClient(create_app(tmp_path, api_key="k")) as c:
        setup = {"game": "tic_tac_toe", "seat": 0, "opponents": ["random"]}
        assert c.post("/api/play/new", json=setup).status_code == 401
        assert c.get("/play", follow_redirects=False).headers["location"].startswith("/login")
        r = c.post("/api/play/new", json=setup, headers={"Authorization": "Bearer k"})
        assert r.status_code == 200


def test_the_form_pages_play_a_move(client):
    r = client.post("/play", data={"game": "tic_tac_toe", "seat": "0", "opponents": "random"})
    assert r.status_code == 200 and 'name="move" value="4"' in r.text
    game_id = r.url.params["id"]
    r = client.post(f"/play/game?id={game_id}", data={"move": "4"})
    assert r.status_code == 200 and 'value="4"' not in r.text  # the centre is taken now
    assert client.post(f"/play/game?id={game_id}", data={"move": "4"}).status_code == 400


def test_games_played_into_a_tournament_are_rated_with_its_players(runs):
    """Three tic-tac-toe games as `alice` against the tournament's `random2`: recorded in the
    tournament's people file (its store untouched), and alice is on the leaderboard, after the
    format's order, with the W/D/L her records give; random2's counts grow by the same games."""
    from tests.web.conftest import DB, MATCHES

    people = runs / "web_test" / "tournament.people.jsonl"
    with TestClient(create_app(runs)) as c:
        before = c.get("/api/leaderboard", params={"db": DB}).json()
        for seed in (1, 2, 3):
            s = new(c, game="tic_tac_toe", seat=seed % 2, opponents=["random2"], seed=seed,
                    tournament=DB, player="alice")  # fmt: skip
            while not s["over"]:
                s = move(c, s, move=s["view"]["legal_moves"][0]).json()
        after = c.get("/api/leaderboard", params={"db": DB}).json()
    records = list(read_jsonl(people))
    assert len(records) == 3 and all(set(r.seats.values()) == {"alice", "random2"} for r in records)
    wdl = [0, 0, 0]
    for r in records:
        mine = next(a for a, n in r.seats.items() if n == "alice")
        wdl[("win", "draw", "loss").index(r.outcome[mine])] += 1
    rows = {r["player"]: r for r in after["players"]}
    assert [rows["alice"][k] for k in ("wins", "draws", "losses")] == wdl
    assert rows["alice"]["rank"] == 4 and after["matches"] == MATCHES + 3
    old = {r["player"]: r for r in before["players"]}["random2"]
    theirs = [old["wins"] + wdl[2], old["draws"] + wdl[1], old["losses"] + wdl[0]]
    assert [rows["random2"][k] for k in ("wins", "draws", "losses")] == theirs
    assert before["matches"] == MATCHES and "alice" not in {r["player"] for r in before["players"]}


@pytest.mark.parametrize(
    "setup, says",
    [({"opponents": ["cfr"]}, "must be players of"), ({"game": "kuhn_poker"}, "not 'kuhn_poker'"),
     ({"player": "random"}, "not a player's"), ({"tournament": "../x.db"}, "no such path")],
)  # fmt: skip
def test_a_bad_game_into_a_tournament_is_a_400(runs, setup, says):
    from tests.web.conftest import DB

    body = {"game": "tic_tac_toe", "seat": 0, "opponents": ["mcts"], "tournament": DB, **setup}
    with TestClient(create_app(runs)) as c:
        r = c.post("/api/play/new", json=body)
    assert r.status_code == 400 and says in r.json()["error"] and "\n" not in r.json()["error"]
