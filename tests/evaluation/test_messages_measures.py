"""Trust-and-Split's message measures by hand on crafted matches, the blanked control of the
game, and `arena eval` with `blank_messages` from the command line."""

import json

import pytest
import yaml

import games
from cli.main import main as arena_main
from core.records import MatchRecord, TurnRecord, outcomes
from evaluation.messages import messages_rows

PARAMS = {"rounds": 2}
BEATS = {"rock": "scissors", "scissors": "paper", "paper": "rock"}


def hands(seed: int) -> list[tuple[str, str]]:
    """The hands seed `seed` deals in the two rounds (the deal draws from the seed alone)."""
    env = games.make("trust_and_split", **PARAMS)
    env.reset(seed=seed)
    while not all(env.terminations.values()):
        env.step("" if env.phase == "message" else 0)
    return [r.hands for r in env.results]


def a_lie(hand: str) -> str:
    return next(h for h in BEATS if h != hand)


def crafted(k: int, seed: int, agent_seat: int, said: list[str], claims, game="trust_and_split"):
    """A 2-round match: the agent's message each round (the other is silent), then the claims
    (player_0's, player_1's) of each round; `said` entries are "true", "lie" or a message."""
    dealt = hands(seed)
    turns, points = [], [0.0, 0.0]
    seats = {"player_0": "x", "player_1": "x"}
    seats[f"player_{agent_seat}"] = "agent"
    for r in range(2):
        first = r % 2  # player_0 speaks first in round 1, player_1 in round 2
        for p in (first, 1 - first):
            mine = dealt[r][p]
            text = {"true": f"My hand is {mine}.", "lie": f"{a_lie(mine)}, trust me"}.get(
                said[r], said[r]
            )
            msg = text if p == agent_seat else ""
            turns.append(TurnRecord(-1, f"player_{p}", seats[f"player_{p}"], msg, msg))
        for p in (0, 1):
            turns.append(TurnRecord(-1, f"player_{p}", "?", str(claims[r][p]), claims[r][p]))
        coins = [10 * c / max(10, sum(claims[r])) for c in claims[r]]
        for p in (0, 1):
            value = 10 if BEATS[dealt[r][p]] == dealt[r][1 - p] else 1
            points[p] += coins[p] * value
    mid = f"agent|00.{game}|00.x|{k:05d}"
    returns = {"player_0": points[0], "player_1": points[1]}
    params = {**PARAMS, **({"blank_messages": True} if game.endswith("blanked") else {})}
    rec = MatchRecord(
        mid, "trust_and_split", params, seed, seats, turns, returns, outcomes(returns)
    )
    return rec, dealt, points


def test_message_rows_by_hand():
    """Match 0: the agent (player_0) names its hand truly, then lies; match 1 (player_1): a
    message that claims nothing ("rock or paper"), then silence. 4 message turns, 3 with a
    message, 2 claims, 1 true. The blanked twins make 10 points less (match 0) and 20 less
    (match 1) than their originals, whatever the hands."""
    a, dealt_a, pts_a = crafted(0, 5, 0, ["true", "lie"], [(10, 0), (0, 10)])
    b, _, pts_b = crafted(1, 6, 1, ["rock or paper", ""], [(5, 5), (5, 5)])
    # the twins: the same seeds; the claims moved so that each round loses exactly 9 x the coins
    twin_a, _, tpts_a = crafted(
        0, 5, 0, ["true", "lie"], [(10, 0), (0, 10)], "trust_and_split/blanked"
    )
    twin_b, _, tpts_b = crafted(
        1, 6, 1, ["rock or paper", ""], [(4, 6), (6, 4)], "trust_and_split/blanked"
    )
    rows = messages_rows([a, b, twin_a, twin_b], "agent")
    row, twin = rows
    assert (row.game, row.opponent, twin.game) == (
        "trust_and_split",
        "x",
        "trust_and_split/blanked",
    )
    assert (row.matches, row.message_turns, row.spoke, row.claims) == (2, 4, 0.75, 0.5)
    assert row.truthful == 0.5 and row.truthful_ci == (0.5, 0.5)  # one match with claims
    lost = [BEATS[h[1]] == h[0] for h in dealt_a]  # the agent's hand lost, by round
    losing_claims = sum(lost)
    true_losing = int(lost[0])  # round 1's claim is the true one
    assert row.truthful_losing == (true_losing / losing_claims if losing_claims else None)
    welfare = [sum(pts_a) / 200, sum(pts_b) / 200]
    blanked = [sum(tpts_a) / 200, sum(tpts_b) / 200]
    assert row.welfare == pytest.approx(sum(welfare) / 2)
    assert row.blanked_welfare == pytest.approx(sum(blanked) / 2)
    gains = [w - b for w, b in zip(welfare, blanked)]
    assert row.messages_gain == pytest.approx(sum(gains) / 2)
    lo, hi = row.messages_gain_ci
    assert min(gains) - 1e-9 <= lo <= hi <= max(gains) + 1e-9
    assert twin.blanked_welfare is None and twin.truthful == 0.5  # the agent still wrote them


def test_blanked_messages_reach_no_reader():
    """With blank_messages the other player's message is nothing in every text it reads and to
    the scripted bots; the writer still sees its own."""
    env = games.make("trust_and_split", rounds=1, blank_messages=True)
    env.reset(seed=0)
    env.step("My hand is rock, claim nothing.")
    assert "said nothing" in env.state_text("player_1") or all(
        "rock, claim nothing" not in line for line in env.history_text("player_1")
    )
    assert not any("claim nothing" in line for line in env.history_text("player_1"))
    assert not any("claim nothing" in line for line in env.state_text("player_1").splitlines())
    assert any("claim nothing" in line for line in env.history_text("player_0"))
    env.step("")
    assert env.social_action("player_1", cooperate=True) == 5  # no hand heard: half
    shown = games.make("trust_and_split", rounds=1)
    shown.reset(seed=0)
    shown.step("My hand is rock.")
    assert any("My hand is rock." in line for line in shown.history_text("player_1"))


def test_eval_plays_the_blanked_twins_on_the_same_seeds(tmp_path):
    """`blank_messages: true`: every match again, the same seed, messages blanked; the honest
    bots' messages carry the hands: with them the winning hand takes every coin, without them
    each claims half."""
    config = {
        "agent": "tit_for_tat",
        "games": [
            {
                "name": "trust_and_split",
                "params": {"rounds": 3},
                "opponents": ["tit_for_tat"],
                "blank_messages": True,
            }
        ],
        "matches": 6,
        "seed": 3,
    }
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(config))
    assert arena_main(["eval", str(path), "--out", str(tmp_path / "out")]) == 0
    rows = json.loads((tmp_path / "out" / "eval.json").read_text())
    (row,) = [r for r in rows if r["kind"] == "messages" and r["game"] == "trust_and_split"]
    assert row["truthful"] == 1.0 and row["claims"] == 1.0  # "My hand is rock." every round
    assert row["welfare"] == pytest.approx(1.0)  # the winning hand takes every coin
    # blanked, neither hears a hand and both claim 5: 5 x 10 + 5 x 1 of the optimum 10 x 10
    assert row["blanked_welfare"] == pytest.approx(0.55)
    assert row["messages_gain"] == pytest.approx(0.45) and row["messages_gain_ci"] == pytest.approx(
        [0.45, 0.45]
    )
    cells = [r for r in rows if r["kind"] == "cell" and r["seat"] == "all"]
    assert sorted(c["game"] for c in cells) == ["trust_and_split", "trust_and_split/blanked"]


def test_blank_messages_only_for_a_game_with_messages(tmp_path, capsys):
    path = tmp_path / "eval.yaml"
    games_ = [{"name": "tic_tac_toe", "blank_messages": True}]
    path.write_text(yaml.safe_dump({"agent": "random", "games": games_}))
    assert arena_main(["eval", str(path), "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err.strip()
    assert err.endswith("blank_messages is true or false, for a game with messages")
    assert "\n" not in err


def test_the_blank_messages_flag_twins_the_games_with_messages(tmp_path, capsys):
    """`--blank-messages` sets it on trust_and_split and leaves prisoners_dilemma as it is; a
    run with no game that has messages is refused in one line."""
    out = tmp_path / "out"
    args = ["eval", "--agent", "tit_for_tat", "--opponents", "tit_for_tat", "--matches", "2"]
    games_ = ["--games", "trust_and_split", "prisoners_dilemma", "--param", "rounds=2"]
    assert arena_main([*args, *games_, "--blank-messages", "--out", str(out)]) == 0
    rows = json.loads((out / "eval.json").read_text())
    cells = {r["game"] for r in rows if r["kind"] == "cell"}
    assert cells == {"trust_and_split", "trust_and_split/blanked", "prisoners_dilemma"}
    bad = ["--games", "prisoners_dilemma", "--blank-messages", "--out", str(tmp_path / "x")]
    assert arena_main([*args, *bad]) != 0
    assert "none of the games (prisoners_dilemma) has messages" in capsys.readouterr().err


def test_a_console_too_narrow_for_the_messages_table_gets_it_turned_not_cut():
    """On 80 columns the messages table (15 columns) is printed a measure a line, the rows as
    columns, with no value cut to an ellipsis; on a console wide enough it stays a row a line."""
    import io
    import re

    from rich.console import Console

    from evaluation.report import as_rows, print_report

    a, *_ = crafted(0, 5, 0, ["true", "lie"], [(10, 0), (0, 10)])
    b, *_ = crafted(1, 6, 1, ["rock or paper", ""], [(5, 5), (5, 5)])
    rows = as_rows(messages_rows([a, b], "agent"))  # 4 message turns, 3 with a message
    narrow, wide = io.StringIO(), io.StringIO()
    print_report(rows, Console(file=narrow, width=80))
    print_report(rows, Console(file=wide, width=250))
    text = narrow.getvalue()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    assert re.search(r"^spoke +0\.75$", text, re.M) and re.search(r"^matches +2$", text, re.M)
    assert "message_turns" in text and "messages_gain_ci" in text
    lines = [line for line in wide.getvalue().splitlines() if "trust_and_split" in line]
    assert len(lines) == 1 and "0.75" in lines[0] and "…" not in wide.getvalue()
