"""The tournament page's views beside the leaderboard, on a real tournament whose players are
named as a `checkpoints:` entry names them (NAME@STEP; bots of growing strength stand in for
the checkpoints): the rating-against-step JSON (its series and values against the report's
leaderboard rows), the win-rate heat map (its cells against a count from the SQLite rows),
the other ratings, and, in a real browser, the plot's points on the page."""

import json
import sqlite3
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from starlette.testclient import TestClient

from cli.main import main as arena_main
from tests.web.browser import chromium, screenshot, web_server
from tournaments.report import leaderboard_json
from tournaments.run import load_tournament
from web.app import create_app
from web.ratings import rating_steps

CONFIG = {
    "name": "checkpoints",
    "format": "round_robin",
    "players": {
        "tiny@0": "random",
        "tiny@5": "mcts:4",
        "tiny@20": "mcts:40",
        "other@2": "random",
        "other@10": "mcts:10",
        "random": "random",
    },
    "games": ["tic_tac_toe"],
    "games_per_pairing": 2,
    "rating": {"reference": "random"},
}
DB = "ckpt/tournament.db"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The runs folder of the tournament, played once through `arena tournament`."""
    root = tmp_path_factory.mktemp("ckpt")
    config = root / "ckpt.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    assert arena_main(["tournament", str(config), "--db", str(root / "runs" / DB)]) == 0
    return root / "runs"


def test_rating_steps_are_the_leaderboards_rows_by_step(runs):
    data = TestClient(create_app(runs)).get("/api/rating_steps", params={"db": DB}).json()
    rows = {r["player"]: r for r in leaderboard_json(load_tournament(runs / DB))["players"]}
    series = {s["label"]: s for s in data["panel"]["series"]}
    assert list(series) == ["other", "tiny"]  # `random` is no checkpoint
    assert series["tiny"]["players"] == ["tiny@0", "tiny@5", "tiny@20"]  # by step, not by name
    assert series["other"]["players"] == ["other@2", "other@10"]
    for s in series.values():
        for name, (step, minutes, elo, lo, hi) in zip(s["players"], s["points"]):
            assert step == int(name.split("@")[1]) and minutes is None
            assert [elo, lo, hi] == [rows[name]["elo"], rows[name]["lo"], rows[name]["hi"]]


def test_rating_steps_leave_out_bots_and_best():
    rows = [
        {"player": p, "elo": 1.0, "lo": None, "hi": 2.0}
        for p in ("a@best", "mcts", "run@x", "my@run@7", "my@run@3")
    ]
    (only,) = rating_steps(rows)["series"]
    assert only["label"] == "my@run" and [p[0] for p in only["points"]] == [3, 7]
    assert rating_steps([{"player": "random", "elo": 0.0, "lo": 0, "hi": 0}])["series"] == []


class Cells(HTMLParser):
    """The heat map's cells from the page: (row player, column player) -> (rate, games)."""

    def __init__(self) -> None:
        super().__init__()
        self.columns: list[str] = []
        self.cells: dict = {}
        self._in, self._row, self._col, self._th = False, None, 0, False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._in = a.get("id") == "heat-map"
        elif self._in and tag == "tr":
            self._row, self._col = a.get("data-player"), 0
        elif self._in and tag == "th":
            self._th = True
        elif self._in and tag == "td" and self._row:
            column = self.columns[self._col]
            if "data-rate" in a:
                self.cells[self._row, column] = (float(a["data-rate"]), int(a["data-games"]))
            self._col += 1

    def handle_endtag(self, tag):
        self._th = False if tag == "th" else self._th
        self._in = False if tag == "table" else self._in

    def handle_data(self, data):
        if self._in and self._th and self._row is None and data.strip() != "row vs column":
            self.columns.append(data.strip())


def test_heat_map_cells_are_the_stores_head_to_head_counts(runs):
    page = TestClient(create_app(runs)).get("/tournament", params={"db": DB})
    assert page.status_code == 200
    parsed = Cells()
    parsed.feed(page.text)
    points: dict = {}
    with sqlite3.connect(runs / DB) as conn:
        for (outcome,) in conn.execute("SELECT outcome FROM matches"):
            (a, result), (b, _) = json.loads(outcome).items()
            s = {"win": 1.0, "draw": 0.5, "loss": 0.0}[result]
            for key, pts in (((a, b), s), ((b, a), 1 - s)):
                got = points.setdefault(key, [0.0, 0])
                got[0] += pts
                got[1] += 1
    assert len(parsed.columns) == len(CONFIG["players"])
    assert parsed.cells.keys() == points.keys()
    for key, (pts, n) in points.items():
        assert parsed.cells[key] == (pytest.approx(pts / n), n)


def test_other_ratings_have_a_row_per_player(runs):
    data = TestClient(create_app(runs)).get("/api/other_ratings", params={"db": DB}).json()
    assert {r["player"] for r in data["players"]} == set(CONFIG["players"])
    assert sum(r["alpha_rank"] for r in data["players"]) == pytest.approx(1.0, abs=1e-6)
    assert all(r["openskill"]["sigma"] > 0 for r in data["players"])


def test_the_step_plot_renders_its_points_in_a_browser(runs):
    with chromium() as browser, web_server(runs, cwd=runs) as url:
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(f"{url}/tournament?db={quote(DB)}")
        page.wait_for_selector("#rating-steps svg circle.point")
        assert page.locator("#rating-steps svg circle.point").count() == 5
        assert page.locator("#rating-steps svg polyline.curve").count() == 2
        assert page.locator("#rating-steps svg line.bar").count() == 5
        page.wait_for_selector("#other-ratings tbody tr:nth-child(6)")
        assert page.locator("#heat-map td.cell").count() == 36
        screenshot(page, "web-rating-steps.png")
