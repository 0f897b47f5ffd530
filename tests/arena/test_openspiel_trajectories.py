"""Matches of OpenSpiel games as pyspiel's standard trajectories: OpenSpiel replays them to
the recorded returns, and they import back as the records they came from."""

import json
from dataclasses import asdict

import numpy as np
import pyspiel
import pytest

import games
from agents.base import decision
from agents.bots import MCTSAgent, RandomAgent
from arena.openspiel_trajectories import (
    export_openspiel,
    from_openspiel,
    import_openspiel,
    to_openspiel,
)
from arena.runner import plan_matches, play
from cli.main import main
from core.records import read_jsonl


class Forfeits:
    """An agent whose every reply is invalid, with the forfeit fallback (the match ends)."""

    name = "forfeits"

    def act(self, turns):
        return [
            decision(t, self.name, None, move="", valid=False, fallback="forfeit") for t in turns
        ]


def played(tmp_path, game, agents, matches, opening=0, seed=0):
    out = tmp_path / "matches.jsonl"
    names = list(agents)
    plans = plan_matches(game, names, matches, seed=seed, opening=opening, prefix=f"{game}-")
    list(play(plans, agents, out=str(out)))
    return out


@pytest.fixture(scope="module")
def matches(tmp_path_factory):
    """Bot matches of sequential, imperfect-information, chance and simultaneous games."""
    tmp = tmp_path_factory.mktemp("matches")
    out = None
    two = {"a": RandomAgent("a"), "b": RandomAgent("b")}
    for game, params, agents, opening in [
        ("tic_tac_toe", {}, {"random": RandomAgent("random"), "mcts": MCTSAgent("mcts", 10)}, 2),
        ("kuhn_poker", {}, two, 0),
        ("leduc_poker", {}, two, 1),
        ("goofspiel", {}, two, 0),
        ("liars_dice", {}, two, 0),
        ("openspiel:breakthrough", {"rows": 5, "columns": 5}, two, 0),
    ]:
        plans = plan_matches(
            game, list(agents), 6, seed=11, params=params, opening=opening, prefix=f"{game}-"
        )
        out = tmp / "matches.jsonl"
        list(play(plans, agents, out=str(out)))
    return out


def test_openspiel_replays_every_exported_match_to_its_recorded_returns(matches, tmp_path):
    out = tmp_path / "openspiel.jsonl"
    summary = export_openspiel([matches], out)
    records = list(read_jsonl(matches))
    assert summary.matches == len(records) == 36 and summary.skipped == {}
    lines = out.read_text().splitlines()
    for record, line in zip(records, lines):
        trajectory = pyspiel.Trajectory(line)  # OpenSpiel's own reader and replay
        final = trajectory.reconstruct_final_state()
        assert final.is_terminal() and trajectory.header().terminal
        assert final.returns() == [record.returns[a] for a in record.seats]
        assert list(trajectory.header().returns) == final.returns()
        moves = [t.action for t in record.turns]
        played_by_players = [h.action for h in final.full_history() if h.player >= 0]
        assert played_by_players == moves  # every recorded move, in order
        states = trajectory.reconstruct_all_states()
        assert len(states) == len(json.loads(line)["transitions"]) + 1
    goofspiel = [json.loads(x) for x in lines if "goofspiel" in x]
    assert goofspiel and all(
        any(t["player"] == -2 and len(t["joint_action"]) == 2 for t in g["transitions"])
        for g in goofspiel
    )  # simultaneous rounds are joint transitions
    kuhn = json.loads(next(x for x in lines if "kuhn_poker" in x))
    deal = [t for t in kuhn["transitions"] if t["player"] == -1]
    assert len(deal) == 2 and deal[0]["chance_outcomes"] == [[0, 1 / 3], [1, 1 / 3], [2, 1 / 3]]
    assert all("legal_actions" in t for t in kuhn["transitions"] if t["player"] >= 0)


def test_exported_matches_import_back_as_the_records_they_came_from(matches, tmp_path):
    out = tmp_path / "openspiel.jsonl"
    export_openspiel([matches], out)
    back = tmp_path / "back.jsonl"
    assert import_openspiel([out], back).matches == 36
    original = list(read_jsonl(matches))
    assert [asdict(r) for r in read_jsonl(back)] == [asdict(r) for r in original]
    assert any(t.agent == "opening" for r in original for t in r.turns)  # openings kept as such


def test_a_forfeit_is_a_non_terminal_trajectory_that_imports_back(tmp_path):
    """A forfeit ends the match where OpenSpiel's game goes on: the trajectory stops there,
    not terminal, with the recorded returns; a simultaneous round it cuts short keeps the
    move already made. Both come back on import."""
    for game in ("tic_tac_toe", "goofspiel"):
        path = played(
            tmp_path / game, game, {"random": RandomAgent("random"), "forfeits": Forfeits()}, 2
        )
        records = list(read_jsonl(path))
        for record in records:
            trajectory = to_openspiel(record)
            parsed = pyspiel.Trajectory(json.dumps(trajectory))
            assert not parsed.header().terminal
            forfeiter = next(s for s, a in record.seats.items() if a == "forfeits")
            assert record.returns[forfeiter] == -1.0
            assert parsed.header().returns == [record.returns[a] for a in record.seats]
            assert asdict(from_openspiel(trajectory)) == asdict(record)
        if game == "goofspiel":  # player_1 forfeits after player_0 bid in the same round
            cut = next(r for r in records if r.seats["player_1"] == "forfeits")
            assert [t.player for t in cut.turns] == ["player_0", "player_1"]


def test_a_trajectory_from_openspiel_imports_as_a_match(tmp_path):
    """Trajectories written by OpenSpiel itself (random play, chance included) import with the
    returns OpenSpiel gives, every move and the rewards credited to the turns."""
    rng = np.random.default_rng(3)
    lines = []
    for game_string in ("leduc_poker", "goofspiel(num_cards=4)", "tic_tac_toe"):
        game = pyspiel.load_game(game_string)
        state = game.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                outcomes, probs = zip(*state.chance_outcomes())
                state.apply_action(int(rng.choice(outcomes, p=probs)))
            elif state.is_simultaneous_node():
                state.apply_actions([int(rng.choice(state.legal_actions(p))) for p in range(2)])
            else:
                state.apply_action(int(rng.choice(state.legal_actions())))
        lines.append((state, pyspiel.Trajectory(state).to_string()))
    path = tmp_path / "from_openspiel.jsonl"
    path.write_text("".join(text + "\n" for _, text in lines))
    out = tmp_path / "matches.jsonl"
    assert main(["import", "openspiel", str(path), str(out)]) == 0
    records = list(read_jsonl(out))
    for (state, _), record in zip(lines, records):
        name = state.get_game().get_type().short_name
        assert record.game == f"openspiel:{name}"
        assert [record.returns[a] for a in record.seats] == state.returns()
        assert sum(t.reward for t in record.turns) == pytest.approx(sum(state.returns()))
        for a in record.seats:
            assert sum(t.reward for t in record.turns if t.player == a) == pytest.approx(
                record.returns[a]
            )
        assert [t.action for t in record.turns] == [
            h.action for h in state.full_history() if h.player >= 0
        ]
    assert records[1].params == {"num_cards": 4}
    assert records[0].match_id == "from_openspiel-00001"
    # a pretty-printed single trajectory (OpenSpiel's own examples) reads too
    single = tmp_path / "one.json"
    single.write_text(json.dumps(json.loads(lines[2][1]), indent=2))
    assert import_openspiel([single], tmp_path / "one.jsonl").matches == 1


def test_chance_outcomes_given_to_reset_are_the_deal():
    env = games.make("kuhn_poker")
    env.reset(seed=0, options={"chance": [2, 0]})
    assert env.moves[:2] == [(-1, 2), (-1, 0)]
    with pytest.raises(ValueError, match="chance outcome 7 is not possible"):
        env.reset(seed=0, options={"chance": [7]})


def test_bad_input_is_one_line(matches, tmp_path, capsys):
    social = played(
        tmp_path, "prisoners_dilemma", {"a": RandomAgent("a"), "b": RandomAgent("b")}, 2
    )
    assert main(["export", "openspiel", str(social), str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("(games: prisoners_dilemma)") and "\n" not in err
    assert not (tmp_path / "x.jsonl").exists()

    tampered = tmp_path / "tampered.jsonl"
    record = next(read_jsonl(matches))  # tic-tac-toe: a move onto a taken cell
    record.turns[1].action = record.turns[0].action
    tampered.write_text(record.to_json() + "\n")
    assert main(["export", "openspiel", str(tampered), str(tmp_path / "y.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not replay from its seed" in err and "\n" not in err

    junk = tmp_path / "junk.jsonl"
    junk.write_text(
        '{"header": {"game_string": "tic_tac_toe"}, "transitions": [{"player": 0, "action": 99}]}\n'
    )
    assert main(["import", "openspiel", str(junk), str(tmp_path / "z.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"arena import: error: {junk}: trajectory 1: not a valid OpenSpiel trajectory"
    )
    assert "\n" not in err

    (tmp_path / "exists.jsonl").write_text("")
    assert main(["export", "openspiel", str(matches), str(tmp_path / "exists.jsonl")]) == 2
    assert "exists (add --overwrite" in capsys.readouterr().err
    assert (
        main(["export", "openspiel", str(matches), str(tmp_path / "exists.jsonl"), "--overwrite"])
        == 0
    )
