"""No prompt shows a player what it may not know.

Grouping test: over many random states, decision points are grouped by the player's
OpenSpiel information set; within a group the player's full prompt must be identical, i.e.
deals (or pending simultaneous bids) that differ only in what the player cannot see give the
same prompt. Hanabi has no information-state string: its information set is the sequence of
the player's observation strings and the (public) moves.

Direct tests: the opponent's card/dice/hand never appears where it should not, checked on
exhaustive sets of deals that share everything the player sees.
"""

import re
from collections import defaultdict

import numpy as np
import pytest

import games
from games.parsing import normalize

HIDDEN_INFO = [
    n
    for n in games.names()
    if games.info(n).source == "openspiel"
    and (games.info(n).information == "imperfect" or games.info(n).dynamics == "simultaneous")
]


def information_set(env, player: int) -> str:
    """The player's information set at the env's current state, from pyspiel."""
    if env.game.get_type().provides_information_state_string:
        return env.state.information_state_string(player)
    state, seen = env.game.new_initial_state(), []  # Hanabi: observations + public moves
    for who, action in env.moves:
        if who >= 0:
            seen.append(f"p{who}:{action}")
        state.apply_action(action)
        seen.append(state.observation_string(player))
    return "\n".join(seen)


def decision_points(name, playouts, seed=0):
    """(agent, information set, prompt, full history) at every decision of random playouts."""
    env = games.make(name)
    rng = np.random.default_rng(seed)
    for episode in range(playouts):
        env.reset(seed=seed * 100_003 + episode)
        for agent in env.agent_iter():
            obs, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
                continue
            player = env.possible_agents.index(agent)
            pending = tuple(
                sorted(getattr(env, "_buffer", {}).items())
            )  # simultaneous bids not yet applied
            yield (
                agent,
                information_set(env, player),
                env.view(agent).prompt(),
                (tuple(map(str, env.moves)), pending),
            )
            env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))


def test_the_hidden_information_games_are_covered():
    assert {"kuhn_poker", "leduc_poker", "liars_dice", "goofspiel", "hanabi_mini", "hanabi"} <= set(
        HIDDEN_INFO
    )


@pytest.mark.parametrize("name", HIDDEN_INFO)
def test_prompt_is_a_function_of_the_information_set(name):
    prompts, histories = defaultdict(set), defaultdict(set)
    for agent, infoset, prompt, history in decision_points(name, playouts=400):
        prompts[(agent, infoset)].add(prompt)
        histories[(agent, infoset)].add(history)
    leaking = {k: p for k, p in prompts.items() if len(p) > 1}
    assert not leaking, (
        f"{name}: {len(leaking)} information sets with several prompts, e.g.\n"
        + "\n=====\n".join(sorted(next(iter(leaking.values()))))
    )
    # Not vacuous: many groups hold decision points whose hidden information differs.
    shared = sum(len(h) > 1 for h in histories.values())
    assert shared >= 10, (
        f"{name}: only {shared} information sets were reached by different histories"
    )


@pytest.mark.parametrize("name", ["kuhn_poker", "liars_dice"])
def test_prompts_differ_when_the_information_set_differs(name):
    """The converse sanity check: what the player does see shows up in the prompt. (Not Leduc:
    its information sets tell the two suits apart, which the prompt rightly leaves out.)"""
    by_prompt = defaultdict(set)
    for agent, infoset, prompt, _ in decision_points(name, playouts=200):
        by_prompt[(agent, prompt)].add(infoset)
    assert len(by_prompt) > 10 and all(len(s) == 1 for s in by_prompt.values())


# --- direct tests ----------------------------------------------------------------------
def deal(name, wanted, actions=(), seeds=20_000, **params):
    """An env whose chance outcomes so far are `wanted` after playing `actions`, or None."""
    env = games.make(name, **params)
    for seed in range(seeds):
        env.reset(seed=seed)
        for action in actions:
            env.step(action)
        if [a for p, a in env.moves if p == -1] == list(wanted):
            return env
    return None


def seen_text(env, agent):
    """What the deal can change in a prompt: state and history (the rules are fixed)."""
    view = env.view(agent)
    return "\n".join([view.state, *view.history, *view.legal_moves])


@pytest.mark.parametrize("actions", [[], [0], [1], [0, 1]])
def test_kuhn_opponent_card_never_shown(actions):
    for mine in range(3):
        prompts = set()
        for theirs in set(range(3)) - {mine}:
            env = deal("kuhn_poker", [mine, theirs], actions)
            agent = env.agent_selection
            assert agent == ("player_0" if len(actions) % 2 == 0 else "player_1")
            # Seen from player_0 (cards dealt in seat order) when it is to act; player_1 too.
            for seat, card in (("player_0", mine), ("player_1", theirs)):
                other = theirs if seat == "player_0" else mine
                text = seen_text(env, seat)
                names = {0: ("J", "Jack"), 1: ("Q", "Queen"), 2: ("K", "King")}
                assert f"Your card: {names[card][0]}" in text
                rest = re.sub(r"Your card: .*\n", "", text)
                for word in names[other]:
                    assert not re.search(rf"\b{word}\b", rest), (seat, word, rest)
            prompts.add(env.view("player_0").prompt())
        assert len(prompts) == 1  # player_0's prompt is the same whichever card player_1 holds


def test_leduc_opponent_card_never_shown():
    ranks = "JQK"
    # player_0 holds card 0 (J); player_1 holds each other card; public card 3 (Q) after Call, Call.
    prompts = defaultdict(set)
    for theirs in (1, 2, 4, 5):
        for actions, wanted in (([], [0, theirs]), ([1, 1], [0, theirs, 3 if theirs != 3 else 2])):
            env = deal("leduc_poker", wanted, actions)
            assert env is not None
            text = seen_text(env, "player_0")
            public = (
                [
                    f"Public card: {ranks[wanted[2] // 2]}",
                    f"public card revealed: {ranks[wanted[2] // 2]}",
                ]
                if len(wanted) > 2
                else []
            )
            rest = text.replace("Your card: J", "")
            for shown in public:
                rest = rest.replace(shown, "")
            if ranks[theirs // 2] != "J":
                assert not re.search(rf"\b{ranks[theirs // 2]}\b", rest), rest
            prompts[tuple(actions)].add(env.view("player_0").prompt())
    assert all(len(p) == 1 for p in prompts.values())


def test_liars_dice_opponent_dice_never_shown():
    # player_0 rolled a 2; whatever player_1 rolled, player_0's prompt is the same before
    # and after a bid, and no line other than "Your dice" lists dice faces.
    for actions in ([], [3]):
        prompts = set()
        for theirs in range(6):
            env = deal("liars_dice", [1, theirs], actions)
            text = seen_text(env, "player_0")
            assert "Your dice: 2." in text
            prompts.add(env.view("player_0").prompt())
            mine_p1 = seen_text(env, "player_1")
            assert f"Your dice: {theirs + 1}." in mine_p1
            assert theirs == 1 or "Your dice: 2." not in mine_p1
        assert len(prompts) == 1


def test_goofspiel_pending_bid_never_shown():
    env = games.make("goofspiel", num_cards=5, points_order="descending")
    prompts = set()
    for bid in range(5):
        env.reset(seed=0)
        env.step(bid)  # player_0 bids first; player_1 now chooses without seeing it
        assert env.agent_selection == "player_1"
        prompts.add(env.view("player_1").prompt())
    assert len(prompts) == 1
    env.step(0)  # player_1 bids 1: the turn resolves and both bids are public
    assert "opponent bid 5" in "\n".join(env.view("player_1").history)


def test_goofspiel_imperfect_information_hides_opponent_bids_and_hand():
    env = games.make("goofspiel", num_cards=4, points_order="descending", imp_info=True)
    prompts = set()
    for bid in (0, 1, 2):  # player_1 bids 4 and wins the 4 whatever player_0 bid below it
        env.reset(seed=0)
        env.step(bid)
        env.step(3)
        text = seen_text(env, "player_1")
        assert "Opponent's hand" not in text and "opponent bid" not in text
        prompts.add(env.view("player_1").prompt())
    assert len(prompts) == 1


@pytest.mark.parametrize("name", ["hanabi_mini", "hanabi"])
def test_hanabi_own_cards_never_shown(name):
    card = re.compile(r"\b[RYGWB][1-5]\b")
    for _agent, _, prompt, _ in decision_points(name, playouts=30):
        own = prompt.split("Your hand (you cannot see it; what the hints tell you):\n")[1].split(
            "\n\n"
        )[0]
        own_lines = [line for line in own.splitlines() if line.startswith("  card")]
        assert own_lines and not any(card.search(line) for line in own_lines), own


def test_hanabi_partner_cards_shown_own_hidden_for_every_own_deal():
    # Two deals that differ only in player_0's own hand give player_0 the same prompt.
    env = games.make("hanabi_mini")
    by_partner_hand = defaultdict(set)
    for seed in range(300):
        env.reset(seed=seed)
        deals = [a for p, a in env.moves if p == -1]
        hand_size = env.hand_size
        partner = tuple(deals[hand_size : 2 * hand_size])  # dealt to player_0 first, then player_1
        deck_left = len(deals)
        by_partner_hand[(partner, deck_left)].add(
            (tuple(deals[:hand_size]), env.view("player_0").prompt())
        )
    groups = [g for g in by_partner_hand.values() if len({own for own, _ in g}) > 1]
    assert groups
    for g in groups:
        assert len({prompt for _, prompt in g}) == 1


def test_move_strings_reveal_nothing_hidden():
    """Move strings are fixed per action id and seat, never built from hidden state."""
    for name in HIDDEN_INFO:
        env = games.make(name)
        moves = set()
        for seed in range(30):
            env.reset(seed=seed)
            agent = env.agent_selection
            moves.add(tuple(normalize(m) for m in env.view(agent).legal_moves))
        # Opening moves depend only on public information, so they never vary with the deal.
        if name not in (
            "hanabi_mini",
            "hanabi",
        ):  # Hanabi's legal hints depend on the partner's visible hand
            assert len(moves) == 1, (name, moves)
