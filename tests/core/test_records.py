"""Match records: win/draw/loss from the returns, per player or per declared team."""

from core.records import outcomes


def test_the_strictly_highest_return_wins_and_ties_draw():
    assert outcomes({"a": 1, "b": 0, "c": -1}) == {"a": "win", "b": "loss", "c": "loss"}
    assert outcomes({"a": 1, "b": 1, "c": -1}) == {"a": "draw", "b": "draw", "c": "loss"}
    assert outcomes({"a": 0, "b": 0}) == {"a": "draw", "b": "draw"}


def test_with_teams_the_members_share_their_teams_outcome():
    wolves_win = {"p0": 1, "p1": -1, "p2": 1, "p3": -1, "p4": -1}
    teams = {"p0": "wolves", "p2": "wolves", "p1": "village", "p3": "village", "p4": "village"}
    assert outcomes(wolves_win, teams) == {
        "p0": "win",
        "p1": "loss",
        "p2": "win",
        "p3": "loss",
        "p4": "loss",
    }
    # a team's result is the sum of its members' returns: 3 + 3 beats three players of 2
    assert outcomes({"a": 3, "b": 3, "c": 2, "d": 2, "e": 2}, {"a": "t", "b": "t"})["a"] == "win"
    assert outcomes({"a": 0, "b": 0, "c": 0, "d": 0}, {"a": "r", "b": "r"}) == dict.fromkeys(
        "abcd", "draw"
    )
