"""Scripted social strategies: the policies, their moves in every social game, and play
through the real runner."""

import numpy as np
import pytest

import games
from agents import make_agent
from agents.base import PendingTurn, decision
from agents.social_bots import (
    POLICIES,
    SocialBot,
    grim_trigger,
    tit_for_tat,
    win_stay_lose_shift,
)
from arena.runner import MatchPlan, play


class Script:
    """Plays a fixed list of actions, one per own decision."""

    name = "script"

    def __init__(self, actions):
        self.actions = list(actions)

    def act(self, turns):
        return [decision(t, self.name, self.actions.pop(0)) for t in turns]


def run(env, seats, seed=0, reset_options=None):
    """Play one episode; returns (per-player list of (action, move text), totals)."""
    env.reset(seed=seed, options=reset_options)
    rng = np.random.default_rng(seed)
    moves = {a: [] for a in env.possible_agents}
    totals = {a: 0.0 for a in env.possible_agents}
    for agent in env.agent_iter():
        if env.terminations[agent] or env.truncations[agent]:
            env.step(None)
            continue
        (rec,) = seats[agent].act([PendingTurn("m0", env, agent, rng)])
        moves[agent].append((rec.action, rec.move))
        env.step(rec.action)
        for a, r in env.rewards.items():
            totals[a] += r
    return moves, totals


def actions(moves):
    return [a for a, _ in moves]


C, D = True, False


def test_policies_on_histories():
    assert tit_for_tat([]) and tit_for_tat([(D, (C,))]) and not tit_for_tat([(C, (C,)), (C, (D,))])
    assert not tit_for_tat([(C, (C, D, C))])  # n players: every other player must have cooperated
    assert grim_trigger([(C, (C,))] * 3) and not grim_trigger([(C, (D,))] + [(D, (C,))] * 5)
    # Pavlov in the prisoner's dilemma: stay after R (CC) and T (DC), shift after S (CD) and P (DD)
    assert [win_stay_lose_shift([h]) for h in [(C, (C,)), (C, (D,)), (D, (C,)), (D, (D,))]] == [
        C,
        D,
        D,
        C,
    ]
    assert win_stay_lose_shift([]) is True
    assert set(POLICIES) == {
        "always_cooperate",
        "always_defect",
        "tit_for_tat",
        "grim_trigger",
        "win_stay_lose_shift",
        "probe",
    }


@pytest.mark.parametrize(
    "strategy, opponent, expected",
    [
        ("tit_for_tat", [0, 1, 1, 0, 1, 0], [0, 0, 1, 1, 0, 1]),  # copies the last move
        ("grim_trigger", [0, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 1]),  # never forgives
        ("win_stay_lose_shift", [0, 1, 1, 0, 0, 1], [0, 0, 1, 0, 0, 0]),
        ("probe", [0] * 6, [0, 1, 0, 0, 0, 0]),  # its one defection, in round 2
        ("probe", [0, 0, 1, 0, 1, 0], [0, 1, 0, 1, 0, 1]),  # then tit-for-tat
        ("always_cooperate", [1] * 6, [0] * 6),
        ("always_defect", [0] * 6, [1] * 6),
    ],
)
def test_strategies_in_the_prisoners_dilemma(strategy, opponent, expected):
    for seat in ("player_0", "player_1"):  # the same in either seat
        other = "player_1" if seat == "player_0" else "player_0"
        env = games.make("prisoners_dilemma", rounds=6)
        moves, _ = run(env, {seat: SocialBot(strategy), other: Script(opponent)})
        assert actions(moves[seat]) == expected


def test_tit_for_tat_vs_always_defect_totals():
    env = games.make("prisoners_dilemma")
    moves, totals = run(
        env, {"player_0": make_agent("tit_for_tat"), "player_1": make_agent("always_defect")}
    )
    assert [m for _, m in moves["player_0"]] == ["Cooperate"] + ["Defect"] * 9
    assert totals == {"player_0": 9.0, "player_1": 14.0}


@pytest.mark.parametrize(
    "name, nice, nasty", [("stag_hunt", "Stag", "Hare"), ("chicken", "Swerve", "Straight")]
)
def test_cooperate_and_defect_map_to_each_games_moves(name, nice, nasty):
    env = games.make(name, rounds=4)
    moves, _ = run(
        env, {"player_0": SocialBot("always_cooperate"), "player_1": SocialBot("always_defect")}
    )
    assert {m for _, m in moves["player_0"]} == {nice} and {m for _, m in moves["player_1"]} == {
        nasty
    }
    moves, _ = run(
        env, {"player_0": SocialBot("tit_for_tat"), "player_1": SocialBot("always_defect")}
    )
    assert [m for _, m in moves["player_0"]] == [nice, nasty, nasty, nasty]


def test_public_goods_strategies():
    env = games.make("public_goods", num_players=4, endowment=10, rounds=3)
    seats = dict(
        zip(
            env.possible_agents,
            [
                SocialBot(s)
                for s in ("always_cooperate", "always_defect", "tit_for_tat", "grim_trigger")
            ],
        )
    )
    moves, _ = run(env, seats)
    assert [actions(moves[a]) for a in env.possible_agents] == [
        [10, 10, 10],
        [0, 0, 0],
        [10, 0, 0],
        [10, 0, 0],
    ]
    # half the endowment or more counts as cooperating: tit-for-tat keeps contributing
    env = games.make("public_goods", num_players=2, endowment=10, rounds=4)
    moves, _ = run(env, {"player_0": Script([5, 5, 4, 9]), "player_1": SocialBot("tit_for_tat")})
    assert actions(moves["player_1"]) == [10, 10, 10, 0]


def test_trust_and_split_cooperators_give_every_coin_to_the_winning_hand():
    env = games.make("trust_and_split")
    moves, totals = run(
        env, {"player_0": SocialBot("always_cooperate"), "player_1": SocialBot("always_cooperate")}
    )
    assert sum(totals.values()) == pytest.approx(
        100.0 * 10
    )  # the best possible: 10 coins x 10 every round
    for k, r in enumerate(env.results):
        winner = r.values.index(10.0)
        assert r.claims[winner] == 10 and r.claims[1 - winner] == 0
        assert env.messages[k] == sorted(
            env.messages[k], key=lambda m: m[0] != k % 2
        )  # speaking order alternates
        assert {text for _, text in env.messages[k]} == {
            f"My hand is {h}." for h in r.hands
        }  # honest messages


def test_trust_and_split_hand_messages_bots_name_their_hand():
    env = games.make("trust_and_split", messages="hand")
    moves, totals = run(
        env, {"player_0": SocialBot("always_cooperate"), "player_1": SocialBot("always_cooperate")}
    )
    assert sum(totals.values()) == pytest.approx(100.0 * 10)
    for k, r in enumerate(env.results):
        assert {text for _, text in env.messages[k]} == {f"My hand is {h}." for h in r.hands}
    named = [a for a in actions(moves["player_0"]) if a > env.coins]
    assert named == [
        env.NAME + ["rock", "paper", "scissors"].index(r.hands[0]) for r in env.results
    ]


def test_trust_and_split_defectors_and_tit_for_tat():
    env = games.make("trust_and_split")
    _, totals = run(
        env, {"player_0": SocialBot("always_defect"), "player_1": SocialBot("always_defect")}
    )
    assert sum(totals.values()) == pytest.approx(
        10 * 5 * (10 + 1)
    )  # 5 coins each: 50 to the winner, 5 to the loser
    assert all(r.claims == (10, 10) for r in env.results)

    env = games.make("trust_and_split", rounds=20)
    run(env, {"player_0": SocialBot("tit_for_tat"), "player_1": SocialBot("always_defect")}, seed=3)
    punished = 0
    for prev, r in zip(env.results, env.results[1:]):
        defected = prev.values[1] == 1.0  # always_defect claimed 10 with the losing hand
        if defected:
            punished += 1
            assert r.claims[0] == 10
        else:  # cooperate: the other named its hand honestly, so claim all or nothing
            assert r.claims[0] == (10 if r.values[0] == 10.0 else 0)
    assert 0 < punished < 19


def test_trust_and_split_cooperator_without_information_claims_half():
    env = games.make("trust_and_split", rounds=1)
    silent = Script([env.SILENT, 3])
    moves, _ = run(env, {"player_0": SocialBot("always_cooperate"), "player_1": silent})
    assert actions(moves["player_0"]) == [f"My hand is {env.results[0].hands[0]}.", 5]


@pytest.mark.parametrize("game", ["negotiation", "tic_tac_toe"])
def test_games_without_cooperation_are_refused(game):
    env = games.make(game)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="cannot play"):
        SocialBot("tit_for_tat").act(
            [PendingTurn("m", env, env.agent_selection, np.random.default_rng(0))]
        )


def test_make_agent_and_bad_names():
    bot = make_agent({"type": "win_stay_lose_shift", "name": "pavlov"})
    assert (
        isinstance(bot, SocialBot)
        and bot.name == "pavlov"
        and bot.strategy == "win_stay_lose_shift"
    )
    with pytest.raises(ValueError, match="unknown social strategy"):
        SocialBot("nice_guy")


def test_bots_through_the_runner():
    agents = {
        "tit_for_tat": make_agent("tit_for_tat"),
        "always_defect": make_agent("always_defect"),
    }
    plans = [
        MatchPlan(f"m{i}", "prisoners_dilemma", ["tit_for_tat", "always_defect"][:: 1 - 2 * i], i)
        for i in range(2)
    ]
    for rec in play(plans, agents):
        tft = next(p for p, a in rec.seats.items() if a == "tit_for_tat")
        other = next(p for p in rec.seats if p != tft)
        assert rec.returns == {tft: 9.0, other: 14.0}
        assert [t.move for t in rec.turns if t.player == tft] == ["Cooperate"] + ["Defect"] * 9


def test_a_named_mapping_spec_takes_the_name_it_is_given():
    """An evaluation builds `{type: ..., name: ...}` opponents with their label as the name."""
    assert make_agent({"type": "always_defect", "name": "greedy"}).name == "greedy"
    assert make_agent({"type": "always_defect", "name": "greedy"}, "greedy#2").name == "greedy#2"
