"""The Starlette app of `arena web`: `create_app(runs_dir, api_key=None)`.

Pages (HTML, rendered on the server from `web/templates/`)
    /                        the tournaments and training runs under the runs folder
    /tournament?db=PATH      the live leaderboard and the stored matches, PAGE_SIZE a page
                             (&page=N, &player=NAME, &game=GAME)
    /match?db=PATH&id=ID     the match viewer (#turn=N links a turn; arrow keys step)
    /runs?run=PATH&run=...   training curves, the chosen runs on one set of panels
    /login                   the API key form (with --api-key)
    /play, /play/game?id=ID  play a game in the browser (`web.play_routes`, with its JSON
                             endpoints under /api/play/)

JSON endpoints
    /api/leaderboard?db=PATH   the standing (`web.standings.Standings.get`); polled each second
    /api/matches?db=PATH&offset=&limit=&player=&game=   a page of stored matches, newest first
    /api/match?db=PATH&id=ID   one match's record (`core.records.MatchRecord` as stored)
    /api/curves?run=PATH&...   the runs' panels (`web.curves.panels`)
    /api/rating_steps?db=PATH  the checkpoint players' ratings by training step
                               (`web.ratings.rating_steps`, from the standing's rows)
    /api/other_ratings?db=PATH OpenSkill, alpha-rank and Nash averaging (`web.ratings.other_ratings`)

PATH is relative to the runs folder; one that leaves it, or names no tournament or run
there, is a 404 (`web.paths.inside`).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tournaments.store import Store, jsonl_beside
from web import auth, paths
from web.curves import panels
from web.play import Games
from web.play_routes import ROUTES as PLAY_ROUTES
from web.ratings import heat_map, other_ratings, rating_steps
from web.replay import replay
from web.standings import Standings
from web.trajectories import Trajectories

PAGE_SIZE = 50  # matches per page of a tournament's list
MAX_PAGE = 500  # the most matches /api/matches returns at once
HERE = Path(__file__).parent


class Site:
    """The app's state: the runs folder, the key, the caches and the templates."""

    def __init__(self, runs_dir: Path, api_key: str | None, games: Games | None = None) -> None:
        self.root = Path(runs_dir).resolve()
        self.api_key = api_key
        self.games = games or Games(self.root)
        self.standings = Standings()
        self.trajectories = Trajectories()
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters["json"] = lambda x: json.dumps(x).replace("</", "<\\/")

    def page(self, name: str, status: int = 200, **context) -> HTMLResponse:
        html = self.templates.get_template(name).render(**context)
        return HTMLResponse(html, status)

    def tournament(self, request: Request) -> Path:
        """The store named by `?db=`, or a 404."""
        try:
            db = paths.inside(self.root, request.query_params.get("db", ""))
        except paths.OutsideRoot as e:
            raise HTTPException(404, str(e)) from None
        if not paths.is_tournament(db):
            raise HTTPException(404, f"no tournament at {request.query_params.get('db')!r}")
        return db

    def runs(self, request: Request) -> dict[str, Path]:
        """The run folders named by `?run=` (label: their path), or a 404."""
        out = {}
        for name in request.query_params.getlist("run"):
            try:
                folder = paths.inside(self.root, name)
            except paths.OutsideRoot as e:
                raise HTTPException(404, str(e)) from None
            if not any((folder / f).is_file() for f in paths.RUN_LOGS):
                raise HTTPException(404, f"no training run at {name!r}")
            out[name] = folder
        return out


def _int(request: Request, name: str, default: int, most: int | None = None) -> int:
    try:
        value = max(0, int(request.query_params.get(name, default)))
    except ValueError:
        raise HTTPException(400, f"{name} must be a whole number") from None
    return min(value, most) if most is not None else value


def _filters(request: Request) -> dict:
    return {k: request.query_params.get(k) or None for k in ("player", "game")}


def match_rows(db: Path, offset: int, limit: int, player=None, game=None) -> dict:
    """A page of the stored matches of `db`, newest first, as the match list shows them."""
    with Store(db, readonly=True) as store:
        page, total = store.results_page(offset, limit, player, game)
    rows = [
        {
            "id": spec.match_id,
            "label": spec.label,
            "game": spec.game,
            "seed": spec.seed,
            "seats": [
                {"player": p, "score": res.scores[p], "outcome": res.outcome[p]} for p in spec.seats
            ],
            "error": res.error,
            "finished_at": res.finished_at,
        }
        for spec, res in page
    ]
    return {"offset": offset, "limit": limit, "total": total, "matches": rows}


def _summary(site: Site, db: Path) -> dict:
    """One line of the index for the store `db`: its name, matches and state."""
    line = {"path": paths.relative(site.root, db), "name": db.parent.name, "state": ""}
    try:
        with Store(db, readonly=True) as store:
            config = json.loads(store.meta("config") or "{}")
            line["done"], line["scheduled"] = store.count()
            status = store.meta("status")
        line["name"] = config.get("name", line["name"])
        line["format"] = config.get("format", "")
        line["state"] = "running" if Store.running(db) else (status or "")
    except (ValueError, sqlite3.Error, OSError) as e:
        line["state"] = f"unreadable now ({e})"
    return line


def index(request: Request) -> Response:
    site: Site = request.app.state.site
    stores = [_summary(site, db) for db in paths.find_tournaments(site.root)]
    runs = [paths.relative(site.root, r) for r in paths.find_runs(site.root)]
    return site.page("index.html", root=str(site.root), tournaments=stores, runs=runs)


def tournament_page(request: Request) -> Response:
    site: Site = request.app.state.site
    db = site.tournament(request)
    page = _int(request, "page", 0)
    filters = _filters(request)
    listing = match_rows(db, page * PAGE_SIZE, PAGE_SIZE, **filters)
    standing = site.standings.get(db)
    steps = rating_steps(standing.get("players", []))
    return site.page(
        "tournament.html",
        db=paths.relative(site.root, db),
        standing=standing,
        steps=bool(steps["series"]),
        heat=site.standings.derived(db, heat_map),
        listing=listing,
        page=page,
        pages=max(1, -(-listing["total"] // PAGE_SIZE)),
        filters=filters,
    )


def leaderboard_api(request: Request) -> Response:
    site: Site = request.app.state.site
    return JSONResponse(site.standings.get(site.tournament(request)))


def rating_steps_api(request: Request) -> Response:
    site: Site = request.app.state.site
    standing = site.standings.get(site.tournament(request))
    return JSONResponse(
        {"matches": standing["matches"], "panel": rating_steps(standing.get("players", []))}
    )


def other_ratings_api(request: Request) -> Response:
    site: Site = request.app.state.site
    db = site.tournament(request)
    data = site.standings.derived(db, other_ratings)
    if data is None:
        raise HTTPException(503, "no standing of this tournament yet")
    return JSONResponse(data)


def matches_api(request: Request) -> Response:
    site: Site = request.app.state.site
    db = site.tournament(request)
    offset = _int(request, "offset", 0)
    limit = _int(request, "limit", PAGE_SIZE, MAX_PAGE)
    return JSONResponse(match_rows(db, offset, limit, **_filters(request)))


def _record(site: Site, request: Request):
    db = site.tournament(request)
    match_id = request.query_params.get("id", "")
    record = site.trajectories.record(jsonl_beside(db), match_id)
    if record is None:
        raise HTTPException(404, f"no trajectory of match {match_id!r} beside {db.name}")
    return db, record


def match_page(request: Request) -> Response:
    site: Site = request.app.state.site
    db, record = _record(site, request)
    return site.page(
        "match.html", db=paths.relative(site.root, db), match=replay(record), record=record
    )


def match_api(request: Request) -> Response:
    site: Site = request.app.state.site
    _, record = _record(site, request)
    return Response(record.to_json(), media_type="application/json")


def runs_page(request: Request) -> Response:
    site: Site = request.app.state.site
    chosen = list(site.runs(request))
    runs = [paths.relative(site.root, r) for r in paths.find_runs(site.root)]
    return site.page("runs.html", runs=runs, chosen=chosen)


def curves_api(request: Request) -> Response:
    site: Site = request.app.state.site
    return JSONResponse({"panels": panels(site.runs(request))})


async def login(request: Request) -> Response:
    """The API key form; a right key sets the session cookie and goes on to `next`."""
    site: Site = request.app.state.site
    target = auth.local_target(request.query_params.get("next"))
    if site.api_key is None:
        return RedirectResponse(target, 303)
    if request.method == "GET":
        return site.page("login.html", target=target, wrong=False)
    fields = await auth.form_fields(request)
    target = auth.local_target(fields.get("next") or target)
    if not auth.same(fields.get("key"), site.api_key):
        return site.page("login.html", 401, target=target, wrong=True)
    return auth.with_session(RedirectResponse(target, 303), site.api_key)


async def not_found(request: Request, exc: HTTPException) -> Response:
    """Errors as JSON under /api/, else as a short page."""
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": exc.detail}, exc.status_code)
    site: Site = request.app.state.site
    return site.page("error.html", exc.status_code, message=exc.detail)


def create_app(
    runs_dir: str | Path, api_key: str | None = None, max_games: int = 8, idle_s: float = 1800.0
) -> Starlette:
    """The app over `runs_dir`; with `api_key` every request needs it (`web.auth`). At most
    `max_games` games are played in the browser at once, each dropped after `idle_s`
    seconds without a request (`web.play.Games`)."""
    site = Site(Path(runs_dir), api_key, Games(Path(runs_dir).resolve(), max_games, idle_s))
    routes = [
        Route("/", index),
        Route("/tournament", tournament_page),
        Route("/match", match_page),
        Route("/runs", runs_page),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/api/leaderboard", leaderboard_api),
        Route("/api/matches", matches_api),
        Route("/api/rating_steps", rating_steps_api),
        Route("/api/other_ratings", other_ratings_api),
        Route("/api/match", match_api),
        Route("/api/curves", curves_api),
        *PLAY_ROUTES,
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        site.games.close()  # the games in play end with the server

    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found}, lifespan=lifespan)
    app.state.site = site
    if api_key is not None:
        app.add_middleware(auth.ApiKey, key=api_key)
    return app
