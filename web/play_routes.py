"""The pages and JSON endpoints of play in the browser (`web.play`).

Pages (plain HTML forms: a legal move is a button, a message a bounded text box)
    GET  /play                 the new-game form, the games in play and the finished ones
    POST /play                 start a game (game, seat, opponents, seed; tournament and player
                               to play into a tournament, rated with its players): to its page
    GET  /play/game?id=ID      the person's seat: its own view, its moves; reloads itself
                               each second while the opponents play
    POST /play/game?id=ID      play a move (move=TEXT) or a message (text=...): back to the page
    GET  /play/match?id=MATCH  a finished game in the match viewer

JSON endpoints
    POST /api/play/new         {"game", "seat", "opponents": [spec, ...], "params"?, "seed"?,
                               "tournament"?: store path, "player"?: your name}
    GET  /api/play/state?id=ID the seat's state (`web.play.Game.state`)
    POST /api/play/move        {"id", "move"} or {"id", "text"}: the state at the seat's next
                               turn or the end (or after `web.play.WAIT_S` seconds)

A bad setup or an illegal move is a 400 (nothing changes), a game past `--max-games` a 429,
an unknown or dropped game a 404.
"""

from __future__ import annotations

import json

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

import games
from core.records import read_jsonl
from web import auth
from web.paths import find_tournaments, relative
from web.play import PLAYER, BadMove, Full, Game, Games, Setup
from web.replay import replay


def _games(request: Request) -> Games:
    return request.app.state.site.games


def _game(request: Request, game_id: str | None) -> Game:
    game = _games(request).get(game_id or "")
    if game is None:
        raise HTTPException(
            404, f"no game {game_id!r} in play (finished long ago, or dropped when idle)"
        )
    return game


def _setup(fields: dict) -> Setup:
    """A `Setup` from the new-game form or JSON; HTTP 400 for a malformed one."""
    opponents = fields.get("opponents", [])
    if isinstance(opponents, str):
        opponents = opponents.replace("\n", ";").split(";")
    seed = fields.get("seed")
    params = fields.get("params") or {}
    try:
        return Setup(
            game=str(fields.get("game", "")),
            seat=int(fields.get("seat", 0)),
            opponents=[str(s) for s in opponents],
            params=dict(params),
            seed=int(seed) if seed not in (None, "") else None,
            tournament=str(fields.get("tournament") or ""),
            player=str(fields.get("player") or "").strip() or PLAYER,
        )
    except (TypeError, ValueError):
        raise HTTPException(400, "seat and seed must be whole numbers, params a mapping") from None


def _start(request: Request, setup: Setup) -> Game:
    try:
        game = _games(request).start(setup)
    except Full as e:
        raise HTTPException(429, str(e)) from None
    except (ValueError, RuntimeError) as e:
        raise HTTPException(400, str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    game.wait()  # the opponents play up to the seat's first turn
    return game


def _move(game: Game, move: str | None, text: str | None) -> None:
    try:
        game.move(move=move, text=text)
    except BadMove as e:
        raise HTTPException(400, str(e)) from None
    game.wait()


def _finished(site) -> list[dict]:
    """The finished games recorded under the runs folder, newest first."""
    path = site.games.out
    if not path.is_file():
        return []
    rows = [
        {"id": r.match_id, "game": r.game, "seats": r.seats, "outcome": r.outcome}
        for r in read_jsonl(path)
    ]
    return rows[::-1][:50]


def play_page(request: Request) -> Response:
    site = request.app.state.site
    return site.page(
        "play.html",
        catalogue=games.names(),
        tournaments=[relative(site.root, db) for db in find_tournaments(site.root)],
        playing=[g.state() for g in site.games.playing()],
        finished=_finished(site),
    )


async def new_game(request: Request) -> Response:
    fields = await auth.form_fields(request)
    game = await run_in_threadpool(_start, request, _setup(fields))
    return RedirectResponse(f"/play/game?id={game.id}", 303)


def game_page(request: Request) -> Response:
    game = _game(request, request.query_params.get("id"))
    return request.app.state.site.page("play_game.html", g=game.state())


async def game_move(request: Request) -> Response:
    game = _game(request, request.query_params.get("id"))
    fields = await auth.form_fields(request)
    await run_in_threadpool(_move, game, fields.get("move"), fields.get("text"))
    return RedirectResponse(f"/play/game?id={game.id}", 303)


def played_match(request: Request) -> Response:
    site = request.app.state.site
    match_id = request.query_params.get("id", "")
    record = (
        site.trajectories.record(site.games.out, match_id) if site.games.out.is_file() else None
    )
    if record is None:
        raise HTTPException(404, f"no finished game {match_id!r}")
    return site.page("match.html", db="", match=replay(record), record=record)


async def _json(request: Request) -> dict:
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        raise HTTPException(400, "the body must be JSON") from None
    if not isinstance(body, dict):
        raise HTTPException(400, "the body must be a JSON object")
    return body


async def new_api(request: Request) -> Response:
    setup = _setup(await _json(request))
    game = await run_in_threadpool(_start, request, setup)
    return JSONResponse(game.state())


def state_api(request: Request) -> Response:
    return JSONResponse(_game(request, request.query_params.get("id")).state())


async def move_api(request: Request) -> Response:
    body = await _json(request)
    game = _game(request, body.get("id"))
    await run_in_threadpool(_move, game, body.get("move"), body.get("text"))
    return JSONResponse(game.state())


ROUTES = [
    Route("/play", play_page),
    Route("/play", new_game, methods=["POST"]),
    Route("/play/game", game_page),
    Route("/play/game", game_move, methods=["POST"]),
    Route("/play/match", played_match),
    Route("/api/play/new", new_api, methods=["POST"]),
    Route("/api/play/state", state_api),
    Route("/api/play/move", move_api, methods=["POST"]),
]
