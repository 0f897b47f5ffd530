"""Tournaments of games of N seats and of teams: the table draw, finishing orders, the
Plackett-Luce fit against an independent scipy fit and against Bradley-Terry, its interval
coverage, and `arena tournament` end to end (real bots, real SQLite, kill -9 and resume)."""

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.optimize import minimize

from cli.main import main as arena_main
from core.records import read_jsonl
from tournaments.config import load_config
from tournaments.plackett_luce import fit_plackett_luce
from tournaments.ratings import ELO_SCALE, fit_bradley_terry
from tournaments.rounds import Finish
from tournaments.run import load_tournament
from tournaments.store import jsonl_beside
from tournaments.tables import table_round_robin

ROOT = Path(__file__).resolve().parents[2]
KUHN3 = {"name": "openspiel:kuhn_poker", "params": {"players": 3}}


def test_finish_points_and_places_with_ties_and_teams():
    f = Finish(("a", "b", "c", "d"), (3.0, 1.0, 1.0, 0.0))
    assert f.points() == [1.0, 0.5, 0.5, 0.0]  # share of the others finished above, a tie half
    assert f.places() == [1, 2, 2, 4]
    two = Finish(("a", "b"), (1.0, 1.0))
    assert two.points() == [0.5, 0.5]  # a two-player draw is half a win
    team = Finish(("a", "b", "c", "d"), (1.0, 2.0, 3.0, 0.0), teams=((0, 2), (1, 3)))
    assert team.points() == [1.0, 0.0, 1.0, 0.0] and team.places() == [1, 2, 1, 2]  # 1 + 3 > 2 + 0


@pytest.mark.parametrize(
    "players,seats,games,tables", [(7, 3, 3, None), (6, 4, 4, None), (7, 3, 1, 14)]
)
def test_the_draw_balances_tables_pairs_and_seats(players, seats, games, tables):
    names = [f"p{i}" for i in range(players)]
    drawn = next(table_round_robin(names, seats, games, tables))
    assert all(len(set(t.players)) == seats for t in drawn)
    per_player = Counter(p for t in drawn for p in t.players)
    pairs = Counter(frozenset(c) for t in drawn for c in combinations(t.players, 2))
    seat_of = Counter(
        (p, (i - g) % seats) for t in drawn for i, p in enumerate(t.players) for g in range(games)
    )
    assert max(per_player.values()) - min(per_player.values()) <= 1
    assert len(pairs) == players * (players - 1) // 2  # every pair meets
    assert max(pairs.values()) - min(pairs.values()) <= 2
    counts = [seat_of[p, s] for p in names for s in range(seats)]
    assert max(counts) - min(counts) <= (0 if games % seats == 0 else 2)
    if tables is None:
        assert len(drawn) == len(list(combinations(names, seats)))


def simulate(strengths, seats, matches, rng, teams=()):
    """Finishing orders drawn from Plackett-Luce (Gumbel-max), random tables of `seats`."""
    names = list(strengths)
    out = []
    for _ in range(matches):
        table = tuple(rng.choice(names, seats, replace=False))
        sides = [list(t) for t in teams] or [[s] for s in range(seats)]
        u = np.array([sum(strengths[table[s]] for s in side) for side in sides])
        order = np.argsort(-(u + rng.gumbel(size=len(sides))))
        result = {k: float(len(sides) - r) for r, k in enumerate(order)}
        scores = [0.0] * seats
        for k, side in enumerate(sides):
            for s in side:
                scores[s] = result[k] / len(side)
        out.append(Finish(table, tuple(scores), tuple(map(tuple, teams))))
    return out


def independent_nll(theta, finishes, index, l2):
    """The penalised Plackett-Luce negative log-likelihood, written out for strict orders."""
    total = 0.5 * l2 * theta @ theta
    for f in finishes:
        sides = f.sides()
        u = [sum(theta[index[f.seats[s]]] for s in side) for side in sides]
        result = [sum(f.scores[s] for s in side) for side in sides]
        order = sorted(range(len(sides)), key=lambda k: -result[k])
        for k in range(len(order) - 1):
            rest = [u[j] for j in order[k:]]
            total -= u[order[k]] - np.logaddexp.reduce(rest)
    return total


@pytest.mark.parametrize("seats,teams", [(3, ()), (4, ()), (4, ((0, 2), (1, 3)))])
def test_plackett_luce_agrees_with_an_independent_maximum_likelihood_fit(seats, teams):
    rng = np.random.default_rng(1)
    strengths = dict(zip("abcdef", [1.0, 0.5, 0.0, -0.3, -0.6, -1.0]))
    finishes = simulate(strengths, seats, 150, rng, teams)
    players = list(strengths)
    index = {p: i for i, p in enumerate(players)}
    ours = fit_plackett_luce(finishes, players, ci=None)
    theirs = minimize(
        independent_nll, np.zeros(len(players)), args=(finishes, index, 0.01), method="BFGS"
    ).x
    theirs_elo = ELO_SCALE * (theirs - theirs.mean()) + 1000  # the field's mean at 1000
    assert np.allclose([ours.ratings[p].elo for p in players], theirs_elo, atol=0.05)


def test_two_seat_plackett_luce_is_bradley_terry():
    rng = np.random.default_rng(2)
    players = [f"p{i}" for i in range(5)]
    games = [
        (players[a], players[b], float(rng.choice([0.0, 0.5, 1.0])))
        for a, b in rng.integers(0, 5, (80, 2))
        if a != b
    ]
    labels = ["chess" if k % 3 else "go" for k in range(len(games))]
    bt = fit_bradley_terry(games, players, "p0", seat=labels)
    pl = fit_plackett_luce(
        [Finish((a, b), (s, 1 - s), (), g) for (a, b, s), g in zip(games, labels)],
        players,
        "p0",
        seat=True,
    )
    for p in players:
        x, y = bt.ratings[p], pl.ratings[p]
        assert np.allclose([x.elo, x.lo, x.hi], [y.elo, y.lo, y.hi], atol=1e-6)
        assert (x.rank_lo, x.rank_hi, x.games) == (y.rank_lo, y.rank_hi, y.games)
    for g in ("chess", "go"):
        assert np.allclose(
            [bt.seat[g].elo, bt.seat[g].lo], [pl.seat[g].elo, pl.seat[g].lo], atol=1e-6
        )


def coverage(runs: int) -> float:
    rng = np.random.default_rng(3)
    strengths = dict(zip("abcde", [0.8, 0.3, 0.0, -0.4, -0.7]))
    hit = total = 0
    for _ in range(runs):
        fit = fit_plackett_luce(simulate(strengths, 3, 60, rng), list(strengths), "c", ranks=False)
        for p, s in strengths.items():
            if p != "c":
                truth = ELO_SCALE * (s - strengths["c"]) + 1000
                hit += fit.ratings[p].lo <= truth <= fit.ratings[p].hi
                total += 1
    return hit / total


def test_sandwich_intervals_cover_the_true_strengths_fast():
    assert 0.84 <= coverage(40) <= 1.0


@pytest.mark.slow
def test_sandwich_intervals_cover_the_true_strengths_near_95_percent():
    assert 0.88 <= coverage(200) <= 0.99


def write(tmp_path, cfg):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_three_player_kuhn_and_public_goods_tournaments_through_the_cli(tmp_path, capsys):
    kuhn = {
        "name": "kuhn3",
        "format": "swiss",
        "players": {f"r{i}": "random" for i in range(5)},
        "games": [KUHN3],
    }
    db = tmp_path / "k.db"
    assert arena_main(["tournament", str(write(tmp_path, kuhn)), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "Plackett-Luce" in out and "finishing positions" in out and "per seat" in out
    result = load_tournament(db)
    assert result.config.games_per_pairing == 3  # N games a table by default: every seat once
    for spec in result.schedule:
        assert len(set(spec.seats)) == 3
    tables = Counter((s.label, frozenset(s.seats)) for s in result.schedule)
    assert set(tables.values()) == {3}
    report = json.loads(db.with_suffix(".json").read_text())
    positions = report["finishing_positions"]
    assert sum(map(sum, positions.values())) == 3 * len(result.results)
    assert {(s["game"], s["seat"]) for s in report["seats"]} == {
        ("openspiel:kuhn_poker", k) for k in range(3)
    }

    goods = {
        "name": "goods",
        "format": "round_robin",
        "players": {
            "coop": "always_cooperate",
            "defect": "always_defect",
            "tft": "tit_for_tat",
            "grim": "grim_trigger",
            "random": "random",
        },
        "games": [{"name": "public_goods", "params": {"rounds": 3}}],
        "games_per_pairing": 4,
    }
    db = tmp_path / "g.db"
    assert arena_main(["tournament", str(write(tmp_path, goods)), "--db", str(db)]) == 0
    result = load_tournament(db)
    assert len(result.results) == 5 * 4  # C(5, 4) tables, 4 rotations
    assert result.outcome.order[0] == "defect"  # free-riding wins every table
    assert result.ratings["defect"].elo > result.ratings["coop"].elo


def test_a_team_game_rates_players_through_their_teams(tmp_path):
    cfg = {
        "name": "teams",
        "format": "round_robin",
        "players": {
            "coop": "always_cooperate",
            "defect": "always_defect",
            "tft": "tit_for_tat",
            "random": "random",
            "grim": "grim_trigger",
        },
        "games": [{"name": "public_goods", "params": {"rounds": 3}, "teams": [[0, 2], [1, 3]]}],
        "games_per_pairing": 4,
    }
    db = tmp_path / "t.db"
    assert arena_main(["tournament", str(write(tmp_path, cfg)), "--db", str(db)]) == 0
    result = load_tournament(db)
    for f in result.finishes():
        points = f.points()
        assert points[0] == points[2] and points[1] == points[3]  # teammates share the result
        assert sorted({points[0], points[1]}) in ([0.0, 1.0], [0.5])
    players = list(cfg["players"])
    index = {p: i for i, p in enumerate(players)}
    theirs = minimize(
        independent_nll_ties_free(result.finishes()), np.zeros(5), args=(index,), method="BFGS"
    ).x
    ours = [result.ratings[p].theta for p in players]
    assert np.allclose(ours, theirs, atol=1e-3)


def test_a_game_that_deals_its_teams_is_rated_by_each_matchs_teams(tmp_path):
    """Werewolf deals wolves and village afresh each game: with no `teams:` key each finish's
    sides are the teams of its match (as the arena recorded the roles), and the ratings are the
    team model's, fitted here independently on those teams."""
    cfg = {
        "name": "dealt",
        "format": "round_robin",
        "players": {
            **{f"h{i}": "werewolf_heuristic" for i in range(4)},
            "quiet": {"type": "werewolf_heuristic", "reveal": False},
            "random": "random",
        },
        "games": [{"name": "werewolf"}],
        "games_per_pairing": 12,
    }
    db = tmp_path / "t.db"
    assert arena_main(["tournament", str(write(tmp_path, cfg)), "--db", str(db)]) == 0
    result = load_tournament(db)
    roles = {r.match_id: r.roles for r in read_jsonl(jsonl_beside(db))}
    wolves = []
    for spec in result.schedule:
        dealt = roles[spec.match_id]
        wolves.append(tuple(i for i in range(6) if dealt[f"player_{i}"] == "werewolf"))
    finishes = result.finishes()
    assert [f.teams for f in finishes] == [  # the game's TEAMS order: wolves, then village
        (w, tuple(i for i in range(6) if i not in w)) for w in wolves
    ]
    assert len(set(wolves)) > 1  # dealt afresh
    players = list(cfg["players"])
    index = {p: i for i, p in enumerate(players)}
    theirs = minimize(
        independent_two_team_nll(finishes, wolves), np.zeros(11), args=(index,), method="BFGS"
    ).x[:6]
    ours = [result.ratings[p].theta for p in players]
    assert np.allclose(ours, theirs, atol=1e-3)


def independent_two_team_nll(finishes, firsts):
    """Two teams per game (`firsts[k]`: the seats of game k's first team): the first team's
    win is Bradley-Terry on the sums of its members' strengths and of the terms of the seats
    they sat in (seats 0-4; the last seat's is 0), a tie half a win; the same prior, 0.01, on
    every parameter."""

    def nll(x, index):
        theta, beta = x[:6], np.append(x[6:], 0.0)
        total = 0.5 * 0.01 * x @ x
        for f, first in zip(finishes, firsts):
            s = [
                sum(theta[index[f.seats[i]]] + beta[i] for i in range(6) if (i in first) == side)
                for side in (True, False)
            ]
            y = f.points()[first[0]]
            total += y * np.logaddexp(0, s[1] - s[0]) + (1 - y) * np.logaddexp(0, s[0] - s[1])
        return total

    return nll


def independent_nll_ties_free(finishes):
    """Two teams: a team's win is Bradley-Terry on the sums of its members' strengths, a
    tie half a win and half a loss."""

    def nll(theta, index):
        total = 0.5 * 0.01 * theta @ theta
        for f in finishes:
            a = sum(theta[index[f.seats[s]]] for s in (0, 2)) - sum(
                theta[index[f.seats[s]]] for s in (1, 3)
            )
            y = f.points()[0]
            total += y * np.logaddexp(0, -a) + (1 - y) * np.logaddexp(0, a)
        return total

    return nll


@pytest.mark.parametrize(
    "change,message",
    [
        ({"format": "single_elimination"}, "needs a game of two seats"),
        ({"games": [KUHN3, "tic_tac_toe"]}, "same number of seats"),
        ({"players": {"a": "random", "b": "random"}}, "needs at least 3 players"),
        ({"games": [{**KUHN3, "teams": [[0, 1]]}]}, "games[0].teams must split the seats 0..2"),
        ({"format_options": {"tables": 0}}, "tables must be a positive integer"),
    ],
)
def test_bad_n_player_configs_are_one_line_errors(change, message):
    cfg = {
        "name": "x",
        "format": "round_robin",
        "players": {f"r{i}": "random" for i in range(4)},
        "games": [KUHN3],
        **change,
    }
    with pytest.raises(ValueError) as e:
        load_config(cfg)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_kill_9_mid_table_tournament_then_resume(tmp_path):
    db = tmp_path / "t.db"
    jsonl = jsonl_beside(db)
    cmd = [
        sys.executable,
        "-m",
        "tournaments.sim",
        "--db",
        str(db),
        "--players",
        "7",
        "--format",
        "swiss",
    ]
    cmd += ["--games", "public_goods", "--k", "4", "--delay", "0.03", "--concurrency", "2"]
    kills = 0
    for _ in range(3):
        before = jsonl.read_bytes().count(b"\n") if jsonl.exists() else 0
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 60
        while (
            proc.poll() is None
            and (jsonl.read_bytes().count(b"\n") if jsonl.exists() else 0) <= before
            and time.time() < deadline
        ):
            time.sleep(0.005)
        time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        assert proc.returncode in (0, -signal.SIGKILL), proc.stderr.read().decode()
    assert kills >= 2, "the tournament finished before it could be killed twice: raise --delay"
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    ids = [r.match_id for r in read_jsonl(jsonl)]
    with sqlite3.connect(db) as conn:
        stored = [m for (m,) in conn.execute("SELECT match_id FROM matches")]
        scheduled = [m for (m,) in conn.execute("SELECT match_id FROM schedule")]
    assert len(ids) == len(set(ids)) == len(stored)  # none lost, none played twice
    assert sorted(ids) == sorted(stored) == sorted(scheduled)
    assert len(stored) == 3 * 1 * 4  # ceil(log2 7) Swiss rounds of one table of 4, 4 games each
    assert json.loads(out.stdout.strip().splitlines()[-1])["matches"] == len(stored)
