"""Tournament reports: the leaderboard numbers, the terminal table, and the HTML page loaded
in headless Chromium (the leaderboard, the bracket, the figures and a turn-by-turn replay
with prompt, reply and move must be in the DOM after the page's JavaScript ran)."""

import base64
from html import escape
import json
import re
import shutil
import subprocess
from collections import Counter
from urllib.parse import quote

import pytest

from arena.records import read_jsonl
from arena.tournament import arena_play_matches, build_agent
from tournaments.config import load_config
from tournaments.report import leaderboard, print_leaderboard, write_html
from tournaments.run import run_tournament
from tournaments.store import jsonl_beside

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def play(tmp_path, cfg):
    config = load_config(cfg)
    db = tmp_path / f"{config.name}.db"
    agents = {n: build_agent(n, s) for n, s in config.players.items()}
    return run_tournament(config, arena_play_matches(agents, jsonl_beside(db), 32, 200), db)


@pytest.fixture(scope="module")
def elimination(tmp_path_factory):
    return play(tmp_path_factory.mktemp("report"), {
        "name": "elim", "format": "double_elimination",
        "format_options": {"seeding": "anchor", "anchor": "random"},
        "players": {
            "tiny": {"type": "llm", "model": "tiny-llama", "max_new_tokens": 3, "fallback": "random", "max_retries": 1, "seed": 0},
            "random": "random",
            "mcts": {"by_game": {"tic_tac_toe": "mcts:10", "kuhn_poker": "cfr"}},
            "random2": "random",
            "random3": "random",
        },
        "games": ["tic_tac_toe", "kuhn_poker"],
        "rating": {"reference": "random"},
    })


def test_leaderboard_counts_match_the_trajectories(elimination):
    rows = leaderboard(elimination)
    assert [r.rank for r in rows] == [1, 2, 3, 4, 5]
    assert [r.player for r in rows] == elimination.outcome.order
    records = list(read_jsonl(elimination.jsonl_path))
    for r in rows:
        counted = Counter(rec.outcome[seat] for rec in records for seat, name in rec.seats.items() if name == r.player)
        assert (r.wins, r.draws, r.losses) == (counted["win"], counted["draw"], counted["loss"])
        assert r.games == r.wins + r.draws + r.losses
        assert r.elo == pytest.approx(elimination.ratings[r.player].elo)
    assert sum(r.wins for r in rows) == sum(r.losses for r in rows)
    by_player = {r.player: r for r in rows}
    assert by_player["random"].elo == pytest.approx(1000.0)  # the reference


def test_terminal_leaderboard(elimination):
    from rich.console import Console

    console = Console(record=True, width=120)
    print_leaderboard(elimination, console)
    text = console.export_text()
    assert "rating [CI]" in text and "1000 (reference)" in text
    for r in leaderboard(elimination):
        assert re.search(rf"│\s+{r.rank} │ {re.escape(r.player)}\s+│", text)


def dump_dom(path, match=None):
    """The page's DOM after its JavaScript ran (`match`: opened with #match=ID)."""
    url = path.as_uri() + (f"#match={quote(match)}" if match else "")
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def match_rows(html):
    """The page's match index (one row per match)."""
    return json.loads(re.search(r"const MATCHES=(\[.*?\]), REPLAY_DIR=", html, re.S).group(1))


@pytest.mark.skipif(not shutil.which(CHROMIUM) and not __import__("os").path.exists(CHROMIUM), reason="needs Debian chromium")
def test_html_report_in_headless_chromium(elimination, tmp_path):
    page = write_html(elimination, tmp_path / "report.html")
    dom = dump_dom(page)
    # the leaderboard: one row per player, in rank order
    board = re.search(r'<table id="leaderboard">(.*?)</table>', dom, re.S).group(1)
    assert re.findall(r'<td class="l player">([^<]+)</td>', board) == elimination.outcome.order
    # the bracket is drawn: one box per bracket match that had entrants, the seeding phase above it
    boxes = re.findall(r'<div class="m" data-match="([^"]+)"', dom)
    assert "W1-0" in boxes and "GF" in boxes and any(b.startswith("L") for b in boxes)
    assert 'id="seeding-rounds"' in dom
    # figures are inline PNGs
    for fig in ("winrate", "ratings"):
        src = re.search(rf'<img id="{fig}"[^>]*src="data:image/png;base64,([^"]+)"', dom).group(1)
        assert base64.b64decode(src)[:4] == b"\x89PNG"
    # the JavaScript ran: it listed the matches and filled the player filter
    n = len(elimination.results)
    assert re.search(rf'<span id="shown" class="k"[^>]*>1-{n} of {n} matches shown \({n} in all\)</span>', dom)
    assert all(f'<option value="{p}">{p}</option>' in dom for p in elimination.config.players)
    # every match is listed, its replay drawn when opened (here from the address): an LLM turn shows
    # its prompt, its replies and the move played
    replays = re.findall(r'<details class="replay" data-i="\d+" data-match-id="([^"]+)"', dom)
    assert sorted(replays) == sorted(elimination.results)
    assert not re.search(r'<div class="turn[^"]*"><b>#', dom)  # none opened yet
    records = list(read_jsonl(elimination.jsonl_path))
    llm_match = next(r.match_id for r in records if any(t.agent == "tiny" for t in r.turns))
    dom = dump_dom(page, match=llm_match)
    start = re.search(rf'<details class="replay" data-i="\d+" data-match-id="{re.escape(escape(llm_match))}"[^>]* open=""', dom).start()
    end = dom.find('<details class="replay"', start + 1)
    opened = dom[start:end if end > 0 else len(dom)]
    assert len(re.findall(r'<details class="replay"[^>]* open=""', dom)) == 1
    turns = [c for c in opened.split('<div class="turn')[1:] if re.match(r'[^>]*><b>#\d+</b> player_\d \(tiny\)', c)]
    assert turns, "no LLM turn in the replays"
    move = re.search(r'plays <b class="move">([^<]+)</b>', turns[0]).group(1)
    assert '<pre class="prompt">' in turns[0] and "LEGAL MOVES" in turns[0] and '<pre class="reply">' in turns[0]
    tiny_moves = {t.move for r in read_jsonl(elimination.jsonl_path) for t in r.turns if t.agent == "tiny"}
    assert move in tiny_moves


def test_round_robin_report_has_rounds_not_bracket(tmp_path):
    result = play(tmp_path, {"name": "rr", "format": "round_robin", "players": {"a": "random", "b": "random", "c": "always_defect"},
                             "games": [{"name": "prisoners_dilemma", "params": {"rounds": 2}}]})
    html = write_html(result, tmp_path / "rr.html").read_text()
    assert 'id="rounds"' in html and 'id="bracket"' not in html
    assert len(match_rows(html)) == 3 and "replayPage(0," in html  # three matches, their replays inside the page
    assert 'id="other-ratings"' in html


def test_points_say_what_they_count_in_the_terminal_and_the_html(tmp_path):
    from rich.console import Console

    result = play(tmp_path, {"name": "pts", "format": "round_robin", "games_per_pairing": 2,
                             "players": {"a": "random", "b": {"by_game": {"tic_tac_toe": "mcts:10", "kuhn_poker": "cfr", "prisoners_dilemma": "tit_for_tat"}},
                                         "c": "random"},
                             "games": ["tic_tac_toe", "kuhn_poker", {"name": "prisoners_dilemma", "params": {"rounds": 2}}]})
    rows = leaderboard(result)
    for r in rows:  # 2 opponents x 2 repeats, a repeat worth 1 = one match of each of the 3 games
        assert r.points == pytest.approx((r.wins + r.draws / 2) / 3) and r.max_points == 4 and r.games == 12
    top = rows[0]
    example = f"e.g. {top.player}: ({top.wins} + {top.draws}/2) / 3 = {top.points:.4g} of 4"
    console = Console(record=True, width=100)
    print_leaderboard(result, console)
    text = " ".join(console.export_text().split())
    assert f"│ {top.points:.4g} of 4 │" in text
    assert "points: win 1, draw ½, loss 0 per match, divided by the config's 3 games" in text and example in text
    html = write_html(result, tmp_path / "pts.html").read_text()
    note = re.search(r'<p class=k id="points-note">([^<]+)</p>', html).group(1)
    assert note.startswith("points: win 1, draw ½, loss 0 per match, divided by the config&#x27;s 3 games") and example in note
    assert f'<td data-v="{top.points:.6g}">{top.points:.4g} of 4</td>' in html
    # a tournament so far (`--report-only` while it runs) has points but no format stats yet
    from dataclasses import replace

    from tournaments.core import Outcome

    so_far = replace(result, outcome=Outcome(result.outcome.order, {p: {"points": s["points"]} for p, s in result.outcome.stats.items()}))
    assert [r.max_points for r in leaderboard(so_far)] == [4, 4, 4]


def test_swiss_points_count_a_bye_as_a_won_pairing(tmp_path):
    result = play(tmp_path, {"name": "sw", "format": "swiss", "format_options": {"rounds": 2}, "games_per_pairing": 2,
                             "players": {"a": "random", "b": "random", "c": "random"}, "games": ["kuhn_poker"]})
    rows = leaderboard(result)
    assert all(r.max_points == 4 for r in rows)  # two rounds, each a 2-game pairing or a bye worth 2
    assert sum(r.max_points - r.games for r in rows) == 4  # two byes
    assert "a bye counts as a won pairing" in write_html(result, tmp_path / "sw.html").read_text()
