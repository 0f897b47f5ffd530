"""Tournament reports: leaderboard numbers, the terminal table, and the HTML page loaded
in headless Chromium (its leaderboard, the bracket, the figures and a turn-by-turn replay
with prompt, reply and move must be in the DOM after the page's JavaScript ran)."""

import base64
import json
import re
import shutil
import subprocess
from collections import Counter
from html import escape
from urllib.parse import quote

import pytest

from agents.by_game import build_agent
from core.records import read_jsonl
from tournaments.config import load_config
from tournaments.matches import arena_play_matches
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
    return play(
        tmp_path_factory.mktemp("report"),
        {
            "name": "elim",
            "format": "double_elimination",
            "format_options": {"seeding": "anchor", "anchor": "random"},
            "players": {
                "tiny": {
                    "type": "llm",
                    "model": "tiny-llama",
                    "max_new_tokens": 3,
                    "fallback": "random",
                    "max_retries": 1,
                    "seed": 0,
                },
                "random": "random",
                "mcts": {"by_game": {"tic_tac_toe": "mcts:10", "kuhn_poker": "cfr"}},
                "random2": "random",
                "random3": "random",
            },
            "games": ["tic_tac_toe", "kuhn_poker"],
            "rating": {"reference": "random"},
        },
    )


def test_leaderboard_counts_match_the_trajectories(elimination):
    rows = leaderboard(elimination)
    assert [r.rank for r in rows] == [1, 2, 3, 4, 5]
    assert [r.player for r in rows] == elimination.outcome.order
    records = list(read_jsonl(elimination.jsonl_path))
    for r in rows:
        counted = Counter(
            rec.outcome[seat]
            for rec in records
            for seat, name in rec.seats.items()
            if name == r.player
        )
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
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def opened_replay(dom, match_id):
    """The HTML of the one replay open in the DOM, which must be `match_id`'s."""
    start = re.search(
        rf'<details class="replay" data-i="\d+" data-match-id="{re.escape(escape(match_id))}"[^>]* open=""',
        dom,
    ).start()
    assert len(re.findall(r'<details class="replay"[^>]* open=""', dom)) == 1
    ends = [
        i
        for i in (dom.find('<details class="replay"', start + 1), dom.find("<script>", start))
        if i > 0
    ]
    return dom[start : min(ends, default=len(dom))]


def match_rows(html):
    """The page's match index (one row per match)."""
    return json.loads(re.search(r"const MATCHES=(\[.*?\]), REPLAY_DIR=", html, re.S).group(1))


@pytest.mark.skipif(
    not shutil.which(CHROMIUM) and not __import__("os").path.exists(CHROMIUM),
    reason="needs Debian chromium",
)
def test_html_report_in_headless_chromium(elimination, tmp_path):
    page = write_html(elimination, tmp_path / "report.html")
    dom = dump_dom(page)
    # leaderboard: one row per player, in rank order
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
    assert re.search(
        rf'<span id="shown" class="k"[^>]*>1-{n} of {n} matches shown \({n} in all\)</span>', dom
    )
    assert all(f'<option value="{p}">{p}</option>' in dom for p in elimination.config.players)
    # every match is listed, its replay drawn when opened (here from the address): an LLM turn shows
    # its prompt, its replies and the move played
    replays = re.findall(r'<details class="replay" data-i="\d+" data-match-id="([^"]+)"', dom)
    assert sorted(replays) == sorted(elimination.results)
    assert not re.search(r'<div class="turn[^"]*"><b>#', dom)  # none opened yet
    records = list(read_jsonl(elimination.jsonl_path))
    llm_match = next(r.match_id for r in records if any(t.agent == "tiny" for t in r.turns))
    dom = dump_dom(page, match=llm_match)
    opened = opened_replay(dom, llm_match)
    turns = [
        c
        for c in opened.split('<div class="turn')[1:]
        if re.match(r"[^>]*><b>#\d+</b> player_\d \(tiny\)", c)
    ]
    assert turns, "no LLM turn in the replays"
    move = re.search(r'plays <b class="move">([^<]+)</b>', turns[0]).group(1)
    assert (
        '<pre class="prompt">' in turns[0]
        and "LEGAL MOVES" in turns[0]
        and '<pre class="reply">' in turns[0]
    )
    tiny_moves = {
        t.move for r in read_jsonl(elimination.jsonl_path) for t in r.turns if t.agent == "tiny"
    }
    assert move in tiny_moves


def test_round_robin_report_has_rounds_not_bracket(tmp_path):
    result = play(
        tmp_path,
        {
            "name": "rr",
            "format": "round_robin",
            "players": {"a": "random", "b": "random", "c": "always_defect"},
            "games": [{"name": "prisoners_dilemma", "params": {"rounds": 2}}],
        },
    )
    html = write_html(result, tmp_path / "rr.html").read_text()
    assert 'id="rounds"' in html and 'id="bracket"' not in html
    assert (
        len(match_rows(html)) == 3 and "replayPage(0," in html
    )  # three matches, their replays inside the page
    assert 'id="other-ratings"' in html


def test_points_say_what_they_count_in_the_terminal_and_the_html(tmp_path):
    from rich.console import Console

    result = play(
        tmp_path,
        {
            "name": "pts",
            "format": "round_robin",
            "games_per_pairing": 2,
            "players": {
                "a": "random",
                "b": {
                    "by_game": {
                        "tic_tac_toe": "mcts:10",
                        "kuhn_poker": "cfr",
                        "prisoners_dilemma": "tit_for_tat",
                    }
                },
                "c": "random",
            },
            "games": [
                "tic_tac_toe",
                "kuhn_poker",
                {"name": "prisoners_dilemma", "params": {"rounds": 2}},
            ],
        },
    )
    rows = leaderboard(result)
    for r in rows:  # 2 opponents x 2 repeats, a repeat worth 1 = one match of each of the 3 games
        assert (
            r.points == pytest.approx((r.wins + r.draws / 2) / 3)
            and r.max_points == 4
            and r.games == 12
        )
    top = rows[0]
    example = f"e.g. {top.player}: ({top.wins} + {top.draws}/2) / 3 = {top.points:.4g} of 4"
    console = Console(record=True, width=100)
    print_leaderboard(result, console)
    text = " ".join(console.export_text().split())
    assert f"│ {top.points:.4g} of 4 │" in text
    assert (
        "points: win 1, draw ½, loss 0 per match, divided by the config's 3 games" in text
        and example in text
    )
    html = write_html(result, tmp_path / "pts.html").read_text()
    note = re.search(r'<p class=k id="points-note">([^<]+)</p>', html).group(1)
    assert (
        note.startswith(
            "points: win 1, draw ½, loss 0 per match, divided by the config&#x27;s 3 games"
        )
        and example in note
    )
    assert f'<td data-v="{top.points:.6g}">{top.points:.4g} of 4</td>' in html
    # a tournament so far (`--report-only` while it runs) has points but no format stats yet
    from dataclasses import replace

    from tournaments.rounds import Outcome

    so_far = replace(
        result,
        outcome=Outcome(
            result.outcome.order,
            {p: {"points": s["points"]} for p, s in result.outcome.stats.items()},
        ),
    )
    assert [r.max_points for r in leaderboard(so_far)] == [4, 4, 4]


def test_swiss_points_count_a_bye_as_a_won_pairing(tmp_path):
    result = play(
        tmp_path,
        {
            "name": "sw",
            "format": "swiss",
            "format_options": {"rounds": 2},
            "games_per_pairing": 2,
            "players": {"a": "random", "b": "random", "c": "random"},
            "games": ["kuhn_poker"],
        },
    )
    rows = leaderboard(result)
    assert all(
        r.max_points == 4 for r in rows
    )  # two rounds, each a 2-game pairing or a bye worth 2
    assert sum(r.max_points - r.games for r in rows) == 4  # two byes
    assert "a bye counts as a won pairing" in write_html(result, tmp_path / "sw.html").read_text()


def record_json(rec):
    """`MatchRecord.to_json` without `dataclasses.asdict`'s deep copies (3/4 of the time for 10,000 records)."""
    d = dict(
        vars(rec), turns=[dict(vars(t), attempts=[vars(a) for a in t.attempts]) for t in rec.turns]
    )
    return json.dumps(d)


def bot_tournament_in_memory(tmp_path, players, k):
    """A finished round robin of simulated Bradley-Terry bots (`tournaments.sim`) built without
    the store: the same schedule, records and result as `run_tournament`, written in one go."""
    from tournaments.formats import make_format
    from tournaments.rounds import drive
    from tournaments.run import TournamentResult, match_specs, pair_result, rate
    from tournaments.sim import bt_record, sim_config, strengths_of
    from tournaments.store import MatchResult

    config = sim_config(players, "round_robin", k=k, seed=0)
    strengths = strengths_of(list(config.players), spread=2.0, seed=0)
    jsonl = tmp_path / "big.jsonl"
    schedule, results, lines = [], {}, []
    rounds = iter(range(10**6))

    def play_round(pairings):
        round_no = next(rounds)
        for p in pairings:
            for spec in match_specs(config, p, round_no):
                rec = bt_record(spec, strengths)
                lines.append(record_json(rec))
                schedule.append(spec)
                results[spec.match_id] = MatchResult.from_record(rec, jsonl)
        return [pair_result(config, p, results, round_no) for p in pairings]

    outcome = drive(
        make_format(config.format, list(config.players), **config.format_kwargs()), play_round
    )
    jsonl.write_text("\n".join(lines) + "\n")
    result = TournamentResult(
        config, outcome, schedule, results, {}, str(tmp_path / "big.db"), str(jsonl)
    )
    rate(config, result)
    return result


@pytest.mark.skipif(
    not shutil.which(CHROMIUM) and not __import__("os").path.exists(CHROMIUM),
    reason="needs Debian chromium",
)
def test_ten_thousand_match_report_is_small_and_opens_fast(tmp_path):
    result = bot_tournament_in_memory(
        tmp_path, players=32, k=21
    )  # 496 pairings x 21 = 10,416 matches
    assert len(result.results) == 10_416
    page = write_html(result, tmp_path / "big.html")
    assert page.stat().st_size <= 10_000_000
    pages = sorted((tmp_path / "big.replays").glob("*.js"))
    assert len(pages) == -(-10_416 // 200)  # the replays, 200 matches a file beside the page
    rows = match_rows(page.read_text())
    assert len(rows) == 10_416 and rows[-1][10] == len(pages) - 1
    late = rows[-1][0]  # a replay from the last file
    dom = dump_dom(page, match=late)
    shown = re.search(r'<span id="shown" class="k" data-ms="(\d+)">([^<]+)</span>', dom)
    assert int(shown.group(1)) <= 3000, f"{shown.group(1)} ms from navigation to a drawn page"
    assert shown.group(2) == "10401-10416 of 10416 matches shown (10416 in all)"
    opened = opened_replay(dom, late)
    rec = next(r for r in read_jsonl(result.jsonl_path) if r.match_id == late)
    moves = re.findall(r'plays <b class="move">([^<]+)</b>', opened)
    assert moves == [t.move for t in rec.turns] and '<pre class="prompt">' in opened
    # a replay file gone missing: the match says so instead of hanging
    (tmp_path / "big.replays" / "0000.js").unlink()
    assert "0000.js not found beside the report" in opened_replay(
        dump_dom(page, match=rows[0][0]), rows[0][0]
    )
    # the same page rewritten small: the replays move back inside it and the old files go
    (tmp_path / "small").mkdir()
    write_html(bot_tournament_in_memory(tmp_path / "small", players=4, k=1), tmp_path / "big.html")
    assert not (tmp_path / "big.replays").exists()


def test_rank_ranges_and_seat_advantage_in_terminal_and_html(tmp_path):
    from rich.console import Console

    result = bot_tournament_in_memory(tmp_path, players=5, k=20)
    ranges = {p: (r.rank_lo, r.rank_hi) for p, r in result.ratings.items()}
    assert all(1 <= lo <= hi <= 5 for lo, hi in ranges.values()) and any(
        lo < hi for lo, hi in ranges.values()
    )
    shown = {p: f"{lo}" if lo == hi else f"{lo}-{hi}" for p, (lo, hi) in ranges.items()}
    h = result.seat["tic_tac_toe"]
    seat = f"tic_tac_toe {h.elo:+.0f} [{h.lo:+.0f}, {h.hi:+.0f}]"
    console = Console(record=True, width=200)
    print_leaderboard(result, console)
    text = console.export_text()
    for p in result.config.players:
        assert re.search(rf"│ {p}\s+│[^│]+│\s+{shown[p]} │", text)
    assert (
        "first mover's advantage (fitted with the ratings, which are corrected for it), Elo: "
        + seat
        in " ".join(text.split())
    )
    html = write_html(result, tmp_path / "r.html").read_text()
    for p in result.config.players:
        assert re.search(
            rf'<td class="l player">{p}</td>(<td[^>]*>[^<]*</td>){{2}}<td class="rank-range"[^>]*>{shown[p]}</td>',
            html,
        )
    assert seat in re.search(r'<p class=k id="rating-note">([^<]+)</p>', html).group(1)
