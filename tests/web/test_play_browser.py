"""Play in a real browser: a person at the system Chromium (driven by Playwright) plays a
whole tic-tac-toe game against `random` and a Kuhn poker hand against `cfr` on a real
`arena web` server, by clicking the move buttons; the finished games are in the record.

Skipped without Playwright or a Chromium on the PATH (never `playwright install`).
"""

import pytest

from core.records import read_jsonl
from tests.web.browser import chromium, screenshot, web_server


@pytest.fixture
def server(tmp_path):
    """`arena web` over an empty runs folder on a free port: its base URL and the folder."""
    runs = tmp_path / "runs"
    runs.mkdir()
    with web_server(runs, "--max-games", "4", cwd=tmp_path) as url:
        yield url, runs


@pytest.fixture
def browser():
    with chromium() as b:
        yield b


def start(page, base: str, game: str, opponents: str) -> None:
    page.goto(f"{base}/play")
    page.select_option("#game", game)
    page.fill("#opponents", opponents)
    page.click("#start")
    page.wait_for_selector("#status")


def play_out(page, choose) -> int:
    """Click a move button (`choose(names)`) until the game is over; the clicks made."""
    clicks = 0
    while page.locator("#outcome").count() == 0:
        buttons = page.locator("button.move")
        if buttons.count() == 0:  # the opponent is playing: the page reloads itself
            page.wait_for_timeout(200)
            continue
        name = choose(buttons.all_text_contents())
        with page.expect_navigation():
            page.click(f"button.move[value='{name}']")
        clicks += 1
        assert clicks < 10
    return clicks


def test_a_person_plays_tic_tac_toe_against_random_by_clicking(server, browser):
    base, runs = server
    page = browser.new_page(viewport={"width": 1000, "height": 800})
    start(page, base, "tic_tac_toe", "random")
    assert page.locator("button.move").count() == 9
    screenshot(page, "web-play.png")
    clicks = play_out(page, lambda names: names[0])
    outcome = page.text_content("#outcome")
    [record] = read_jsonl(runs / "web-play" / "matches.jsonl")
    human = [t for t in record.turns if t.agent == "human"]
    assert len(human) == clicks and outcome == record.outcome["player_0"]
    page.click("#record")  # the finished game in the match viewer
    assert page.locator("section.turn").count() == len(record.turns)


def test_a_person_plays_a_kuhn_hand_against_cfr(server, browser):
    base, runs = server
    page = browser.new_page()
    start(page, base, "kuhn_poker", "cfr")
    assert "Your card" in page.text_content("#state")
    play_out(page, lambda names: "Bet" if "Bet" in names else names[0])
    [record] = read_jsonl(runs / "web-play" / "matches.jsonl")
    assert record.game == "kuhn_poker" and record.seats["player_1"] == "cfr"
    assert page.text_content("#outcome") == record.outcome["player_0"]


def test_a_person_sends_a_message_in_trust_and_split(server, browser):
    """A message turn in the browser: a text box bounded by the game's longest message; the
    message sent is in the seat's history, and the claim that follows is buttons."""
    base, _ = server
    page = browser.new_page()
    start(page, base, "trust_and_split", "tit_for_tat")
    page.wait_for_selector("#text")
    assert page.get_attribute("#text", "maxlength") == "500"
    assert page.locator("button.move").count() == 0
    page.fill("#text", "My hand is rock.")
    with page.expect_navigation():
        page.click("#send")
    page.wait_for_selector("button.move")  # the claim: 0..10 coins
    assert page.locator("button.move").count() == 11
    assert "My hand is rock." in page.text_content("#history")
