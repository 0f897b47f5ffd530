"""The text-native games: IPD, stag hunt, chicken, public goods, Trust-and-Split, negotiation.

PettingZoo compliance (api/seed/parallel tests), payoffs on hand-computed sequences, the
random horizon (seeded, never revealed), leak tests (a player's prompt never depends on
what it may not see), illegal actions, parsing, and hundreds of random playouts.
"""

import contextlib
import io
import warnings

import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test
from pettingzoo.test.seed_test import parallel_seed_test

import games
from games.parsing import ParseError

MATRIX = ["prisoners_dilemma", "stag_hunt", "chicken"]
SIMULTANEOUS = MATRIX + ["public_goods"]
ALL = SIMULTANEOUS + ["trust_and_split", "negotiation", "simple_negotiation"]


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def play(env, actions, totals=None):
    """Step `actions` in AEC order (env already reset); rewards summed into `totals`."""
    totals = {a: 0.0 for a in env.possible_agents} if totals is None else totals
    for a in actions:
        env.step(a)
        for agent, r in env.rewards.items():
            totals[agent] += r
    return totals


# --- registry and PettingZoo compliance ---------------------------------------------------


def test_catalogue_entries():
    for name in ALL:
        info = games.info(name)
        assert info.split == "extra" and info.source == "native"
    assert {games.info(n).kind for n in SIMULTANEOUS + ["trust_and_split"]} == {"social_dilemma"}
    assert games.info("negotiation").kind == "general_sum"
    assert {games.info(n).dynamics for n in SIMULTANEOUS} == {"simultaneous"}
    assert games.info("trust_and_split").dynamics == "mixed"
    assert (
        games.info("public_goods").num_players
        == len(games.make("public_goods").possible_agents)
        == 4
    )


@pytest.mark.parametrize("name", ALL)
def test_api_and_seed(name):
    quiet(api_test, games.make(name), num_cycles=300)
    quiet(seed_test, lambda: games.make(name), num_cycles=100)


def test_trust_and_split_hand_messages_api_and_seed():
    params = dict(messages="hand", state_rounds=1, state_progress=False)
    quiet(api_test, games.make("trust_and_split", **params), num_cycles=300)
    quiet(seed_test, lambda: games.make("trust_and_split", **params), num_cycles=100)


@pytest.mark.parametrize("name", SIMULTANEOUS)
def test_parallel_api_and_seed(name):
    quiet(parallel_api_test, games.make_parallel(name), num_cycles=200)
    quiet(
        parallel_seed_test,
        lambda: games.make_parallel(name, random_horizon="geometric"),
        num_cycles=100,
    )
    par = games.make_parallel(name, rounds=3)
    par.reset(seed=0)
    for _ in range(3):
        obs, rew, term, trunc, info = par.step(
            {a: par.action_space(a).sample() for a in par.agents}
        )
    assert all(term.values()) and not par.agents


@pytest.mark.parametrize("name", ["trust_and_split", "negotiation"])
def test_sequential_games_are_not_parallelizable(name):
    with pytest.raises(ValueError, match="not a simultaneous-move game"):
        games.make_parallel(name)


@pytest.mark.parametrize("name", ["trust_and_split", "public_goods", "stag_hunt"])
def test_random_horizon_api_and_seed(name):
    for kind in ("geometric", "uniform"):
        quiet(api_test, games.make(name, random_horizon=kind), num_cycles=100)
        quiet(seed_test, lambda: games.make(name, random_horizon=kind), num_cycles=60)


# --- payoffs on hand-computed sequences ----------------------------------------------------


def test_prisoners_dilemma_payoffs():
    env = games.make("prisoners_dilemma", rounds=5)
    env.reset(seed=0)
    C, D = 0, 1
    per_round, totals = [], None
    for a0, a1 in [(C, C), (C, D), (D, D), (D, C), (C, D)]:
        totals = play(env, [a0], totals)
        assert env.rewards == {"player_0": 0, "player_1": 0}  # nothing paid mid-round
        totals = play(env, [a1], totals)
        per_round.append((env.rewards["player_0"], env.rewards["player_1"]))
    assert per_round == [(3, 3), (0, 5), (1, 1), (5, 0), (0, 5)]
    assert totals == {"player_0": 9.0, "player_1": 14.0}
    assert all(env.terminations.values())
    assert env.infos["player_1"]["last_round"] == {
        "round": 5,
        "moves": [0, 1],
        "payoffs": [0.0, 5.0],
    }


def test_matrix_payoffs_are_configurable():
    env = games.make("prisoners_dilemma", R=2, S=-1, T=4, P=0, rounds=2)
    env.reset()
    assert play(env, [1, 0, 0, 0]) == {"player_0": 6.0, "player_1": 1.0}
    with pytest.raises(ValueError, match="payoff T"):
        games.make("prisoners_dilemma", T="five")


@pytest.mark.parametrize(
    "name, moves, expected",
    [
        (
            "stag_hunt",
            [0, 0, 0, 1, 1, 1],
            (4 + 0 + 2, 4 + 3 + 2),
        ),  # Stag/Stag, Stag/Hare, Hare/Hare
        (
            "chicken",
            [0, 0, 1, 0, 1, 1],
            (3 + 4 + 0, 3 + 1 + 0),
        ),  # Swerve/Swerve, Straight/Swerve, crash
    ],
)
def test_stag_hunt_and_chicken_payoffs(name, moves, expected):
    env = games.make(name, rounds=3)
    env.reset()
    totals = play(env, moves)
    assert (totals["player_0"], totals["player_1"]) == expected


def test_public_goods_payoffs():
    env = games.make("public_goods", num_players=3, endowment=10, multiplier=1.5, rounds=2)
    env.reset()
    totals = play(env, [10, 5, 0])  # pot 15 x 1.5 = 22.5 -> 7.5 each
    assert [env.rewards[a] for a in env.possible_agents] == pytest.approx([7.5, 12.5, 17.5])
    totals = play(env, [10, 10, 10], totals)  # pot 30 x 1.5 = 45 -> 15 each
    assert [totals[a] for a in env.possible_agents] == pytest.approx([22.5, 27.5, 32.5])
    assert all(env.terminations.values())
    assert env.legal_moves("player_0") == []
    assert "pot 30 x 1.5 = 45, 15 to each" in env.history_text("player_0")[1]


def test_public_goods_others_summed_state_text():
    """others_summed: the last round reads as one's own move, the others' sum of their most,
    and one's points (all-or-nothing: player_0 gives, one of the three others keeps: pot 3 x 1.6
    / 4 = 1.2 to each, player_1 keeps 1 + 1.2)."""
    params = dict(endowment=1, state_rounds=1, state_progress=False, others_summed=True)
    env = games.make("public_goods", **params)
    env.reset(seed=0)
    play(env, [1, 0, 1, 1])
    assert env.state_text("player_0").splitlines()[0] == (
        "Last round: you put in 1, the others 2 of 3; your points 1.2"
    )
    assert env.state_text("player_1").splitlines()[0] == (
        "Last round: you put in 0, the others 3 of 3; your points 2.2"
    )
    with pytest.raises(ValueError, match="others_summed must be true or false"):
        games.make("public_goods", others_summed="yes")


def test_trust_and_split_payoffs():
    env = games.make("trust_and_split", rounds=3)
    env.reset(
        seed=0, options={"hands": [("rock", "scissors"), ("paper", "scissors"), ("rock", "paper")]}
    )
    # round 1: player_0 speaks first; rock beats scissors: coin values 10 / 1; claims 7 + 6 > 10 scale
    totals = play(env, ["my hand is rock", env.SILENT, 7, 6])
    assert env.rewards["player_0"] == pytest.approx(10 * 7 / 13 * 10)
    assert env.rewards["player_1"] == pytest.approx(10 * 6 / 13 * 1)
    # round 2: player_1 speaks first; scissors beats paper; claims add up to 10: no scaling
    assert env.agent_selection == "player_1"
    play(env, ["scissors here", "ok", 3, 7], totals)
    assert (env.rewards["player_0"], env.rewards["player_1"]) == (3.0, 70.0)
    # round 3: paper (player_1) beats rock; claims under 10 are paid as claimed
    play(env, [env.SILENT, env.SILENT, 0, 4], totals)
    assert (env.rewards["player_0"], env.rewards["player_1"]) == (0.0, 40.0)
    assert totals == pytest.approx({"player_0": 700 / 13 + 3, "player_1": 60 / 13 + 70 + 40})
    assert all(env.terminations.values())
    assert [r.claims for r in env.results] == [(7, 6), (3, 7), (0, 4)]


def test_trust_and_split_messages_are_truncated_and_empty_means_silent():
    env = games.make("trust_and_split", max_message_chars=10)
    env.reset(seed=0)
    play(env, ["  " + "x" * 50, ""])
    assert env.messages[0] == [(0, "x" * 10), (1, "")]
    assert "sent no message" in env.history_text("player_0")[1]


def test_trust_and_split_hand_messages_are_moves():
    env = games.make("trust_and_split", rounds=2, messages="hand")
    assert env.action_space("player_0").n == 15  # 11 claims, nothing, three hands
    env.reset(seed=0, options={"hands": [("rock", "scissors"), ("paper", "rock")]})
    assert env.legal_moves("player_0") == ["rock", "paper", "scissors", "nothing"]
    assert not env.is_free_text("player_0")
    assert env.parse("player_0", "scissors") == env.NAME + 2
    # player_0 (rock) names paper, a lie; player_1 (scissors) says nothing
    play(env, [env.NAME + 1, env.SILENT])
    assert env.messages[0] == [(0, "My hand is paper."), (1, "")]
    claim_state = env.state_text("player_1")
    assert 'The other player said: "My hand is paper."' in claim_state
    assert "You said nothing." in claim_state
    play(env, [10, 0])
    assert env.results[0].points == (100.0, 0.0)
    # round 2: player_1 speaks first; a string is not a hand move, nor a claim a message
    for bad in ("My hand is rock.", 3):
        probe = games.make("trust_and_split", rounds=2, messages="hand")
        probe.reset(seed=0, options={"hands": [("rock", "scissors")]})
        probe.step(bad)
        assert probe.terminations["player_0"] and probe.rewards["player_0"] == -1.0


def test_trust_and_split_free_messages_refuse_hand_moves():
    env = games.make("trust_and_split")
    env.reset(seed=0)
    env.step(env.SILENT + 1)  # a hand move of messages="hand"
    assert env.terminations["player_0"] and env.rewards["player_0"] == -1.0


def test_trust_and_split_memory_one_state_text():
    env = games.make(
        "trust_and_split", rounds=3, messages="hand", state_rounds=1, state_progress=False
    )
    env.reset(seed=0, options={"hands": [("rock", "scissors"), ("paper", "scissors")]})
    assert env.state_text("player_0").splitlines() == [
        "Your hand: rock.",
        "Message phase: you speak first.",
        "Name a hand to the other player, or nothing.",
    ]
    play(env, [env.NAME, env.NAME + 2, 4, 10])  # both honest; scissors (losing) claims 10
    # round 2: player_1 speaks first, player_0 reads its message before naming a hand
    play(env, [env.NAME + 2])
    assert env.state_text("player_0").splitlines() == [
        "Last round: your hand won (rock against scissors); you claimed 4, the other claimed 10.",
        "Your hand: paper.",
        "Message phase: you speak second.",
        'The other player said: "My hand is scissors."',
        "Name a hand to the other player, or nothing.",
    ]
    assert env.state_text("player_1").startswith(
        "Last round: your hand lost (scissors against rock); you claimed 10, the other claimed 4."
    )
    with pytest.raises(ValueError, match="state_progress=False needs state_rounds"):
        games.make("trust_and_split", state_progress=False)
    with pytest.raises(ValueError, match="messages must be one of"):
        games.make("trust_and_split", messages="emoji")


def test_trust_and_split_reveal_shows_both_hands_and_skips_the_messages():
    params = dict(messages="reveal", state_rounds=1, state_progress=False)
    quiet(api_test, games.make("trust_and_split", **params), num_cycles=300)
    quiet(seed_test, lambda: games.make("trust_and_split", **params), num_cycles=100)
    env = games.make("trust_and_split", rounds=2, **params)
    env.reset(seed=0, options={"hands": [("rock", "scissors"), ("rock", "paper")]})
    # no message phase: player_0 claims first in every round, then player_1
    assert env.phase == "claim" and env.agent_selection == "player_0"
    assert env.legal_moves("player_0") == [str(c) for c in range(11)]
    assert env.state_text("player_0").splitlines() == [
        "Your hand: rock.",
        "The other player's hand: scissors; yours wins.",
        "Claim phase: how many of the 10 coins do you claim?",
    ]
    assert "The other player's hand: rock; yours loses." in env.state_text("player_1")
    assert "Both players see both hands." in env.rules_text("player_0")
    assert "messaging" not in env.rules_text("player_0")
    play(env, [10, 0])  # rock beats scissors: 10 coins at 10 points
    assert env.results[0].points == (100.0, 0.0) and env.messages[0] == []
    assert env.agent_selection == "player_0" and env.phase == "claim"
    assert env.state_text("player_0").splitlines()[:2] == [
        "Last round: your hand won (rock against scissors); you claimed 10, the other claimed 0.",
        "Your hand: rock.",
    ]
    play(env, [10, 10])  # paper beats rock: 5 coins each, at 1 and 10 points
    assert env.results[1].points == (5.0, 50.0)
    assert all(env.terminations.values())


def test_trust_and_split_reveal_cooperators_read_the_hands_not_messages():
    env = games.make("trust_and_split", messages="reveal", rounds=1)
    env.reset(seed=0, options={"hands": [("paper", "rock")]})
    assert env.social_action("player_0", True) == 10  # paper beats rock
    assert env.social_action("player_1", True) == 0
    assert env.social_action("player_1", False) == 10


def _negotiation(**params):
    return games.make(
        "negotiation",
        resources=("Wood", "Gold"),
        inventories=((5, 5), (5, 5)),
        values=((1, 4), (3, 2)),
        **params,
    )


def test_negotiation_trade_and_rewards():
    env = _negotiation(max_turns=4)
    env.reset(seed=0)
    offer = env.parse("player_0", "I propose [Offer: 2 Wood -> 1 Gold]")
    assert (
        env.offers[offer].give_qty == 2
        and env.move_text("player_0", offer) == "Offer: 2 Wood -> 1 Gold"
    )
    totals = play(env, [offer])
    assert env.legal_actions("player_1")[:2] == [
        env.ACCEPT,
        env.DENY,
    ] and env.PASS not in env.legal_actions("player_1")
    play(env, [env.ACCEPT], totals)
    # player_0: -2 Wood (1 each) +1 Gold (4) = +2; player_1: +2 Wood (3 each) -1 Gold (2) = +4
    assert env.rewards == {"player_0": 2.0, "player_1": 4.0}
    assert env.inventory.tolist() == [[3, 6], [7, 4]]
    play(env, [env.PASS, offer], totals)  # player_0 passes, player_1's offer lapses at the end
    assert totals == {"player_0": 2.0, "player_1": 4.0} and all(env.terminations.values())


def test_negotiation_win_loss_and_spiral_preset():
    env = _negotiation(max_turns=2, reward="win_loss")
    env.reset()
    totals = play(env, [env.parse("player_0", "[Offer: 2 Wood -> 1 Gold]"), env.ACCEPT])
    assert totals == {"player_0": -1.0, "player_1": 1.0}  # gains +2 < +4: win/loss only at the end
    spiral = games.make("simple_negotiation")
    spiral.reset()
    assert spiral.resources == ("Wood", "Gold") and spiral.inventory.tolist() == [
        [10, 10],
        [10, 10],
    ]
    assert spiral.values.tolist() == [[5, 15], [15, 5]] and spiral.reward_mode == "win_loss"
    assert play(spiral, [spiral.PASS] * 10) == {
        "player_0": 0.0,
        "player_1": 0.0,
    }  # no trade: a draw


def test_negotiation_counter_offer_declines_the_pending_one():
    env = _negotiation()
    env.reset()
    env.step(env.parse("player_0", "[Offer: 1 Wood -> 1 Gold]"))
    env.step(env.parse("player_1", "[Offer: 2 Wood -> 1 Gold]"))
    assert env.events[-1].kind == "counter" and env.pending[0] == 1
    assert "declining the pending offer" in env.history_text("player_0")[-1]
    env.step(env.DENY)
    assert env.pending is None and env.legal_actions("player_1")[-1] == env.PASS


# --- random horizon -----------------------------------------------------------------------


def _horizon(name, seed, **params):
    env = games.make(name, **params)
    env.reset(seed=seed)
    return env.num_rounds


@pytest.mark.parametrize("kind", ["geometric", "uniform"])
def test_random_horizon_is_reproducible_and_varies(kind):
    lengths = [_horizon("prisoners_dilemma", s, random_horizon=kind) for s in range(40)]
    assert lengths == [_horizon("prisoners_dilemma", s, random_horizon=kind) for s in range(40)]
    assert len(set(lengths)) > 3
    if kind == "uniform":
        assert min(lengths) >= 5 and max(lengths) <= 15
    else:
        assert 1 <= min(lengths) and max(lengths) <= 50
    # an episode lasts exactly the drawn number of rounds
    env = games.make("prisoners_dilemma", random_horizon=kind)
    env.reset(seed=3)
    steps = 0
    while not env.terminations["player_0"]:
        env.step(0)
        steps += 1
    assert steps == 2 * env.num_rounds and len(env.rounds) == env.num_rounds


def test_random_horizon_parameters():
    assert {
        _horizon("stag_hunt", s, random_horizon="uniform", min_rounds=2, max_rounds=3)
        for s in range(30)
    } == {2, 3}
    assert {
        _horizon("chicken", s, random_horizon="geometric", continuation=0.0) for s in range(5)
    } == {1}
    assert {
        _horizon("chicken", s, random_horizon="geometric", continuation=0.99, max_rounds=7)
        for s in range(5)
    } == {7}
    for bad in (
        dict(random_horizon="poisson"),
        dict(random_horizon="geometric", continuation=1.0),
        dict(rounds=0),
        dict(continuation=0.5),
        dict(random_horizon="uniform", min_rounds=5, max_rounds=2),
    ):
        with pytest.raises(ValueError):
            games.make("prisoners_dilemma", **bad)


@pytest.mark.parametrize("name", ["prisoners_dilemma", "trust_and_split"])
def test_players_are_told_the_rule_not_the_drawn_horizon(name):
    seeds = {}
    for s in range(50):
        seeds.setdefault(_horizon(name, s, random_horizon="geometric", continuation=0.8), s)
    (s1, n1), (s2, n2) = [(s, n) for n, s in seeds.items() if n > 1][:2]
    prompts = []
    for s in (s1, s2):
        env = games.make(name, random_horizon="geometric", continuation=0.8)
        env.reset(
            seed=s, options={"hands": [("rock", "paper")]} if name == "trust_and_split" else None
        )
        prompts.append(env.view("player_0").prompt())
    assert prompts[0] == prompts[1]
    assert "continues with probability 0.8" in prompts[0] and "of 10" not in prompts[0]


# --- leak tests ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, a, b", [("prisoners_dilemma", 0, 1), ("public_goods", 0, 10), ("chicken", 1, 0)]
)
def test_nobody_sees_a_move_before_the_round_resolves(name, a, b):
    views = []
    for first in (a, b):
        env = games.make(name)
        env.reset(seed=0)
        env.step(first)
        views.append([env.view(p).prompt() for p in env.possible_agents[1:]])
        views[-1].append(env.observe("player_1")["observation"].tolist())
    assert views[0] == views[1]


def test_trust_and_split_claims_are_simultaneous():
    views = []
    for claim in (0, 10):
        env = games.make("trust_and_split")
        env.reset(seed=0)
        play(env, ["hi", "hello", claim])
        views.append(
            (env.view("player_1").prompt(), env.observe("player_1")["observation"].tolist())
        )
    assert views[0] == views[1]


def test_trust_and_split_hand_leak():
    """player_0's prompts through round 1 are identical whether player_1 holds paper or scissors."""
    seen = []
    for other in ("paper", "scissors"):
        env = games.make("trust_and_split")
        env.reset(seed=0, options={"hands": [("rock", other)]})
        trace = []
        for action in ["I have rock", "fine", 5, 5]:
            trace.append(
                (env.view("player_0").prompt(), env.observe("player_0")["observation"].tolist())
            )
            env.step(action)
        seen.append(trace)
    assert seen[0] == seen[1]
    assert (
        "the other's hand scissors" in env.history_text("player_0")[-1]
    )  # revealed once the round is over


def test_negotiation_value_leak():
    """player_0's prompts over a whole game are identical whatever player_1's private values."""
    traces = []
    for other_values in ((3, 2), (1, 9)):
        env = games.make(
            "negotiation",
            resources=("Wood", "Gold"),
            inventories=((5, 5), (5, 5)),
            values=((1, 4), other_values),
        )
        env.reset(seed=0)
        rng = np.random.default_rng(7)
        trace = []
        while env.agents:
            trace.append(
                (env.view("player_0").prompt(), env.observe("player_0")["observation"].tolist())
            )
            agent = env.agent_selection
            if env.terminations[agent]:
                env.step(None)
                continue
            legal = env.legal_actions(agent)
            env.step(legal[rng.integers(len(legal))])
        traces.append(trace)
    assert traces[0] == traces[1] and len(traces[0]) > 10
    assert "Your private value per unit: Wood 1, Gold 4." in traces[0][0][0]


def test_negotiation_random_values_are_private():
    env = games.make("negotiation")
    env.reset(seed=5)
    text = env.rules_text("player_0") + env.state_text("player_0")
    own = ", ".join(f"{r} {v:g}" for r, v in zip(env.resources, env.values[0]))
    other = ", ".join(f"{r} {v:g}" for r, v in zip(env.resources, env.values[1]))
    assert own in text and other not in text


# --- illegal actions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, prefix, bad",
    [
        ("prisoners_dilemma", [], 2),
        ("prisoners_dilemma", [0], None),  # player_1 offends mid-round
        ("public_goods", [3, 4], 11),
        ("public_goods", [], True),
        ("stag_hunt", [], "Stag"),  # a move string is not an env action
        ("trust_and_split", [], 3),  # a claim during the message phase
        ("trust_and_split", ["hi", "hi"], "five"),  # a message during the claim phase
        ("trust_and_split", ["hi", "hi", 4], 11),  # SILENT is not a claim
        ("negotiation", [], 55),  # Deny with no offer pending
        ("negotiation", [], 10_000),
    ],
)
def test_illegal_action_penalises_the_offender_and_ends_the_game(name, prefix, bad):
    env = games.make(name)
    env.reset(seed=0)
    play(env, prefix)
    offender = env.agent_selection
    env.step(bad)
    assert all(env.terminations.values())
    for a in env.possible_agents:
        assert env.rewards[a] == (-1.0 if a == offender else 0.0)
        assert env.infos[a]["illegal_move"]["agent"] == offender
    assert "illegal move" in env.state_text(offender)
    for _agent in env.agent_iter():  # the episode winds down without crashing
        env.step(None)
    assert env.agents == []


def test_negotiation_infeasible_offer_is_illegal():
    env = games.make(
        "negotiation",
        resources=("Wood", "Gold"),
        inventories=((1, 5), (5, 5)),
        values=((1, 1), (1, 1)),
    )
    env.reset()
    big = next(
        k
        for k, o in enumerate(env.offers)
        if (o.give, o.give_qty, o.get, o.get_qty) == (0, 3, 1, 1)
    )
    assert big not in env.legal_actions("player_0")
    env.step(big)
    assert env.rewards["player_0"] == -1.0 and all(env.terminations.values())


# --- parsing and the text layer --------------------------------------------------------------


def test_parsing_replies():
    env = games.make("prisoners_dilemma")
    env.reset()
    assert env.parse("player_0", "<think>cooperate?</think> I will [defect]") == 1
    assert env.parse("player_0", "\\boxed{\\text{Cooperate}}") == 0
    with pytest.raises(ParseError) as e:
        env.parse("player_0", "Cooperate or Defect, hard to say")
    assert e.value.kind == "ambiguous"
    pg = games.make("public_goods")
    pg.reset()
    assert pg.parse("player_2", "I contribute \\boxed{7}") == 7
    tas = games.make("trust_and_split")
    tas.reset(seed=0)
    assert tas.is_free_text("player_0") and not tas.is_free_text("player_1")
    assert (
        tas.parse("player_0", "<think>lie?</think>  My hand is rock. " + "z" * 600)
        == ("My hand is rock. " + "z" * 600)[:500]
    )
    with pytest.raises(ParseError):
        tas.parse("player_0", "<think>only thinking</think>")
    view = tas.view("player_0")
    assert view.free_text and view.legal_moves == [] and "at most 500 characters" in view.prompt()
    play(tas, ["a", "b"])
    assert tas.parse("player_0", "I claim [10]") == 10 and tas.view("player_0").legal_moves == [
        str(c) for c in range(11)
    ]


@pytest.mark.parametrize("name", ALL)
def test_text_layer_at_random_states(name):
    env = games.make(name, render_mode="ansi")
    rng = np.random.default_rng(0)
    for seed in range(5):
        env.reset(seed=seed)
        while env.agents:
            agent = env.agent_selection
            if env.terminations[agent]:
                env.step(None)
                continue
            for p in env.possible_agents:
                prompt = env.view(p).prompt()
                assert "GAME RULES" in prompt and "CURRENT STATE" in prompt
            assert isinstance(env.render(), str)
            view = env.view(agent)
            if view.free_text:
                env.step(env.parse(agent, f"message {rng.integers(100)}"))
            else:
                k = int(rng.integers(len(view.actions)))
                assert env.parse(agent, f"[{view.legal_moves[k]}]") == view.actions[k]
                env.step(view.actions[k])
        assert "over" in env.state_text("player_0")


def test_bad_parameters_give_clear_errors():
    for name, params, match in [
        ("public_goods", dict(num_players=1), "num_players"),
        ("public_goods", dict(multiplier=-1), "multiplier"),
        ("trust_and_split", dict(coins=0), "coins"),
        ("trust_and_split", dict(high_value=1, low_value=2), "high_value"),
        ("negotiation", dict(preset="nope"), "preset"),
        ("negotiation", dict(values=((1, 2), (3, 4))), "values"),  # 3 resources by default
        ("negotiation", dict(reward="money"), "reward"),
        ("negotiation", dict(resources=("Wood",)), "resource"),
    ]:
        with pytest.raises(ValueError, match=match):
            games.make(name, **params)
    env = games.make("trust_and_split")
    with pytest.raises(ValueError, match="hands"):
        env.reset(options={"hands": [("rock", "rock")]})


# --- random playouts ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_random_playouts_never_crash(name):
    """200 episodes of random play (with occasional garbage actions and free-text messages):
    no exception, episodes end, and cumulative rewards equal the per-step rewards summed."""
    env = (
        games.make(name, random_horizon="geometric")
        if name in SIMULTANEOUS + ["trust_and_split"]
        else games.make(name)
    )
    rng = np.random.default_rng(1)
    garbage = [None, -1, 10**6, "x" * 600, 2.5, "Defect", np.int64(0)]
    illegal_endings = 0
    for episode in range(200):
        env.reset(seed=episode)
        totals = {a: 0.0 for a in env.possible_agents}
        for agent in env.agent_iter(10_000):
            obs, reward, term, trunc, info = env.last()
            if term or trunc:
                env.step(None)
            elif rng.random() < 0.01:
                env.step(garbage[rng.integers(len(garbage))])
            elif env.is_free_text(agent) and rng.random() < 0.5:
                env.step("msg " * int(rng.integers(0, 200)))
            else:
                env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
            for a, r in env.rewards.items():
                totals[a] += r
        assert env.agents == []
        illegal_endings += "illegal_move" in info
        for a in env.possible_agents:
            assert np.isfinite(totals[a])
    assert illegal_endings < 200  # most episodes ran to their end


def test_state_rounds_repeats_only_the_last_rounds_in_the_state_text():
    env = games.make("prisoners_dilemma", state_rounds=1)
    env.reset(seed=0)
    assert "Round 1:" not in env.state_text("player_0")  # nothing played yet
    for a, b in ((0, 1), (1, 1)):
        env.step(a)
        env.step(b)
    state = env.state_text("player_0")
    assert (
        "Round 2: you Defect, the other player Defect -> you 1 points" in state
        and "Round 1:" not in state
    )
    assert "Round 2: you Defect, the other player Defect" in env.state_text("player_1")
    plain = games.make("prisoners_dilemma")
    plain.reset(seed=0)
    plain.step(0)
    plain.step(1)
    assert "Round 1:" not in plain.state_text("player_0")  # default 0: the state text as before
    with pytest.raises(ValueError, match="state_rounds"):
        games.make("prisoners_dilemma", state_rounds=-1)


def test_state_progress_false_leaves_a_strict_memory_one_state_text():
    """`state_progress=False`: no round number, no totals; the same last round reads the same in
    round 2 and in round 5, and each player reads it from its own side."""
    env = games.make("prisoners_dilemma", state_rounds=1, state_progress=False)
    env.reset(seed=0)
    assert env.state_text("player_0") == "Choose your move for this round."
    env.step(0)
    env.step(1)
    after_cd = env.state_text("player_0")
    assert after_cd == (
        "Last round: you Cooperate, the other player Defect -> you 0 points, the other player 5\n"
        "Choose your move for this round."
    )
    assert env.state_text("player_1").startswith(
        "Last round: you Defect, the other player Cooperate"
    )
    for a, b in ((1, 1), (1, 1), (0, 1)):
        env.step(a)
        env.step(b)
    assert env.state_text("player_0") == after_cd  # round 5, the same last round
    with pytest.raises(ValueError, match="state_progress=False needs state_rounds"):
        games.make("prisoners_dilemma", state_progress=False)
    with pytest.raises(ValueError, match="state_progress must be true or false"):
        games.make("prisoners_dilemma", state_rounds=1, state_progress="no")


UNEQUAL_ROUND = {  # one round whose payoffs differ between the seats
    "prisoners_dilemma": [0, 1],
    "stag_hunt": [0, 1],
    "chicken": [0, 1],
    "public_goods": [10, 0, 0, 0],
    "trust_and_split": ["", "", 10, 0],
}


@pytest.mark.parametrize("name", list(UNEQUAL_ROUND))
def test_every_seat_reads_its_own_total_first(name):
    """After a round with unequal payoffs, each seat's state text starts its totals with "you" and its own
    total (seat order put "you" second for player_1): the prompt means the same from every seat."""
    env = games.make(name)
    env.reset(seed=0)
    totals = play(env, UNEQUAL_ROUND[name])
    assert len(set(totals.values())) > 1, totals
    for agent in env.possible_agents:
        text = env.state_text(agent).split("Total points so far: ", 1)[1]
        own = f"{round(totals[agent], 2):g}"
        assert text.startswith((f"you: {own};", f"you {own},")), (agent, text)
    if name == "public_goods":
        last = env.history_text("player_2")[-1]
        assert (
            last.startswith("Round 1: contributions: you 0, player_0 10,")
            and "points: you 14, player_0 4," in last
        )
