"""`arena web` in a real browser: the system Chromium, driven by Playwright, against a real
uvicorn server started as `arena web` on a free port. The match viewer steps through a
recorded match with the arrow keys; a tournament that `arena tournament` plays in another
process shows its new matches on the open leaderboard page within 2 seconds.

Skipped without Playwright or a Chromium on the PATH (never `playwright install`). With
WEB_SCREENSHOTS=1 the screenshots go to docs/guides/img/ (the guide's pictures).
"""

import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

from core.records import read_jsonl
from tests.web.browser import CHROMIUM, arena, chromium, screenshot, web_server
from tests.web.conftest import DB

pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).is_file():
    pytest.skip("no system Chromium to drive", allow_module_level=True)

LIVE = {
    "name": "live",
    "format": "round_robin",
    "players": {"random": "random", "mcts": "mcts:1000"},
    "games": ["tic_tac_toe"],
    "games_per_pairing": 2000,  # minutes of play: the test stops it long before its end
    "arena": {"concurrency": 4},
}


@pytest.fixture
def server(runs):
    """`arena web RUNS` on a free port: its base URL, once it answers."""
    with web_server(runs, cwd=runs) as url:
        yield url


@pytest.fixture
def browser():
    with chromium() as b:
        yield b


def shown_turn(page) -> int:
    visible = page.locator("section.turn:not([hidden])")
    assert visible.count() == 1
    return int(visible.get_attribute("data-turn"))


def test_viewer_steps_through_a_match_with_the_arrow_keys(runs, server, browser):
    record = next(
        r for r in read_jsonl((runs / DB).with_suffix(".jsonl")) if r.game == "connect_four"
    )
    page = browser.new_page(viewport={"width": 1100, "height": 800})
    page.goto(f"{server}/match?db={quote(DB)}&id={quote(record.match_id)}")
    assert shown_turn(page) == 0
    for k in (1, 2, 3):
        page.keyboard.press("ArrowRight")
        assert shown_turn(page) == k and page.url.endswith(f"#turn={k}")
    page.keyboard.press("ArrowLeft")
    assert shown_turn(page) == 2
    marks = page.locator("#turn-2 table.board td.X, #turn-2 table.board td.O").count()
    assert marks == 3  # three discs dropped after the third move
    screenshot(page, "web-match.png")
    page.keyboard.press("End")
    assert shown_turn(page) == len(record.turns) - 1
    page.goto(f"{server}/match?db={quote(DB)}&id={quote(record.match_id)}#turn=1")
    assert shown_turn(page) == 1  # a turn's link opens at that turn


def stored(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM matches").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_open_leaderboard_shows_new_matches_within_two_seconds(runs, server, browser):
    config = runs / "live.yaml"
    config.write_text(yaml.safe_dump(LIVE))
    db = runs / "live" / "tournament.db"
    tournament = arena("tournament", str(config), "--db", str(db), cwd=runs)
    try:
        deadline = time.time() + 120
        while stored(db) == 0:
            assert tournament.poll() is None and time.time() < deadline
            time.sleep(0.1)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(f"{server}/tournament?db=live/tournament.db")
        seen = int(page.text_content("#match-count"))
        for _ in range(3):  # each time the store holds more than the page shows
            while stored(db) <= seen:
                assert tournament.poll() is None, "the tournament ended before the page saw it grow"
                time.sleep(0.05)
            now = stored(db)
            page.wait_for_function(
                f"Number(document.getElementById('match-count').textContent) >= {now}",
                timeout=2000,
            )
            seen = int(page.text_content("#match-count"))
        games = page.locator("#leaderboard td.games").all_text_contents()
        assert sum(map(int, games)) >= 2 * now  # the leaderboard rows moved with the count
        assert page.text_content("#state") == "running"
        screenshot(page, "web-leaderboard.png")
    finally:
        tournament.terminate()
        tournament.wait(timeout=30)
