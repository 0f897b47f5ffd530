"""A game of two teams played one player a side (`sides: true`): every format, elimination too."""

from collections import Counter

import pytest
import yaml

import games
from cli.main import main as arena_main
from core.records import read_jsonl
from tournaments.config import load_config
from tournaments.run import load_tournament, run_tournament
from tournaments.store import jsonl_beside

PLAYERS = {"tags": "codewords_tags", "tags_b": "codewords_tags", "rnd": "codewords_random",
           "rnd_b": "codewords_random"}  # fmt: skip


def write(tmp_path, cfg):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def side_of(record, player: str) -> tuple[int, ...]:
    """The seats `player` held: `player` and `player#k`."""
    names = list(record.seats.values())
    return tuple(i for i, n in enumerate(names) if n == player or n.startswith(f"{player}#"))


def test_seeded_elimination_between_two_codewords_teams(tmp_path):
    """Single elimination, best of 4: in every match each player holds every seat of one team
    (red: seats 0-1, blue: 2-3; `name`, `name#2`), the teams swap between a pairing's games, and
    each player's stored score and outcome are its team's, summed from the record by hand."""
    cfg = {"name": "sides", "format": "single_elimination", "sides": True, "players": PLAYERS,
           "games": ["codewords"], "games_per_pairing": 4, "seed": 3}  # fmt: skip
    db = tmp_path / "t.db"
    assert arena_main(["tournament", str(write(tmp_path, cfg)), "--db", str(db)]) == 0
    records = {r.match_id: r for r in read_jsonl(jsonl_beside(db))}
    result = load_tournament(db)
    assert len(records) == len(result.schedule) >= 6
    for spec in result.schedule:
        rec, stored = records[spec.match_id], result.results[spec.match_id]
        a, b = spec.seats
        assert side_of(rec, a) == (0, 1) and side_of(rec, b) == (2, 3)  # side 0 = red
        assert list(rec.seats.values()) == [a, f"{a}#2", b, f"{b}#2"]
        team = {p: sum(rec.returns[f"player_{i}"] for i in side_of(rec, p)) for p in (a, b)}
        assert stored.scores == pytest.approx(team)
        if team[a] != team[b]:
            winner = max(team, key=team.get)
            assert stored.outcome == {winner: "win", ({a, b} - {winner}).pop(): "loss"}
    orders = Counter(tuple(s.seats) for s in result.schedule)
    assert all(orders[(b, a)] for a, b in orders)  # both sides of every pairing
    assert set(result.ratings) == set(PLAYERS)


def test_werewolf_sides_follow_the_dealt_wolves(tmp_path):
    """Werewolf deals its wolves at reset: side 0 holds the wolves' seats of each match's deal."""
    players = {"h": "werewolf_heuristic", "q": {"type": "werewolf_heuristic", "reveal": False}}
    cfg = {"name": "ww", "format": "round_robin", "sides": True, "players": players,
           "games": ["werewolf"], "games_per_pairing": 4}  # fmt: skip
    db = tmp_path / "t.db"
    assert arena_main(["tournament", str(write(tmp_path, cfg)), "--db", str(db)]) == 0
    result = load_tournament(db)
    records = {r.match_id: r for r in read_jsonl(jsonl_beside(db))}
    for spec in result.schedule:
        rec = records[spec.match_id]
        wolves = tuple(i for i in range(6) if rec.roles[f"player_{i}"] == "werewolf")
        assert side_of(rec, spec.seats[0]) == wolves
        assert wolves == games.declared_teams("werewolf", {}, spec.seed)[0]
    assert {tuple(s.seats) for s in result.schedule} == {("h", "q"), ("q", "h")}


def test_a_sides_tournament_rebuilds_from_its_trajectories(tmp_path):
    """The store deleted, the JSONL (seats `a`, `a#2`, ...) gives back the same results."""
    cfg = {"name": "sides", "format": "round_robin", "sides": True, "players": PLAYERS,
           "games": ["codewords"], "games_per_pairing": 2}  # fmt: skip
    db = tmp_path / "t.db"
    assert arena_main(["tournament", str(write(tmp_path, cfg)), "--db", str(db)]) == 0
    before = load_tournament(db)
    db.unlink()
    after = run_tournament(load_config(write(tmp_path, cfg)), None, db)
    assert after.recovered == len(before.results) and after.played == 0
    assert {p: r.theta for p, r in after.ratings.items()} == pytest.approx(
        {p: r.theta for p, r in before.ratings.items()}
    )


@pytest.mark.parametrize(
    "change, says",
    [({"games": ["tic_tac_toe"]}, "declares 0 teams"), ({"games": ["public_goods"]}, "declares 0 teams"),
     ({"games": [{"name": "codewords", "teams": [[0, 1], [2, 3]]}]}, "has a teams: key"),
     ({"players": {"a#1": "random", "b": "random"}}, "no '#'"), ({"sides": "yes"}, "true or false")],
)  # fmt: skip
def test_bad_sides_configs_are_one_line_errors(change, says):
    cfg = {"name": "x", "format": "single_elimination", "sides": True, "players": PLAYERS,
           "games": ["codewords"], **change}  # fmt: skip
    with pytest.raises(ValueError, match=says) as e:
        load_config(cfg)
    assert "\n" not in str(e.value)


def test_elimination_on_a_team_game_points_to_sides():
    cfg = {"name": "x", "format": "single_elimination", "players": PLAYERS, "games": ["codewords"]}
    with pytest.raises(ValueError, match="sides: true"):
        load_config(cfg)
