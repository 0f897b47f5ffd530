"""Every catalogue game is a compliant PettingZoo env with a working text layer.

- `api_test` and `seed_test` for every name in `games.names()` (the registry, so games
  added later are covered), `parallel_api_test` for the simultaneous ones;
- at least 20 OpenSpiel games through the generic bridge `games.make("openspiel:<game>")`;
- at random states, every seat's prompt renders, and every legal move string parses back
  to its own action in the formats models produce.
"""

import contextlib
import io
import re
import warnings

import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test

import games
from games.parsing import normalize

CATALOGUE = games.names()
SIMULTANEOUS = [n for n in CATALOGUE if games.info(n).dynamics == "simultaneous"]
OPENSPIEL_CATALOGUE = [n for n in CATALOGUE if games.info(n).source == "openspiel"]

# OpenSpiel games run through the generic bridge with default parameters: a spread of
# perfect/imperfect, sequential/simultaneous, 1-4 players, board, card, dice and matrix games.
# Left out: mean-field games (mfg_*; not sequential or simultaneous), repeated_game (needs
# parameters), python_* games (not registered until open_spiel.python.games is imported),
# and the slow-to-play ones (bridge, colored_trails: ~1-2 s per api_test).
BRIDGE_GAMES = [
    "tic_tac_toe",
    "connect_four",
    "kuhn_poker",
    "leduc_poker",
    "liars_dice",
    "hanabi",
    "goofspiel",
    "breakthrough",
    "hex",
    "othello",
    "checkers",
    "mancala",
    "nim",
    "dots_and_boxes",
    "pig",
    "backgammon",
    "phantom_ttt",
    "dark_hex",
    "tiny_bridge_2p",
    "tiny_hanabi",
    "first_sealed_auction",
    "sheriff",
    "blackjack",
    "catch",
    "crazy_eights",
    "euchre",
    "battleship",
    "trade_comm",
    "matrix_pd",
    "matrix_rps",
    "matrix_sh",
    "oshi_zumo",
    "blotto",
    "markov_soccer",
    "laser_tag",
]


def quiet(fn, *args, **kwargs):
    """PettingZoo's tests print and warn about things that are fine here (dict observations)."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def test_the_registry_has_the_openspiel_catalogue():
    expected = {
        "tic_tac_toe",
        "connect_four",
        "kuhn_poker",
        "leduc_poker",
        "liars_dice",
        "goofspiel",
        "hanabi_mini",
        "hanabi",
    }
    assert expected <= set(OPENSPIEL_CATALOGUE)
    assert {n for n in CATALOGUE if games.info(n).split == "train"} >= {
        "tic_tac_toe",
        "kuhn_poker",
        "hanabi_mini",
    }
    assert {n for n in CATALOGUE if games.info(n).split == "held_out"} >= {
        "connect_four",
        "leduc_poker",
        "hanabi",
    }
    assert "goofspiel" in SIMULTANEOUS


@pytest.mark.parametrize("name", CATALOGUE)
def test_api(name):
    quiet(api_test, games.make(name), num_cycles=200)


@pytest.mark.parametrize("name", CATALOGUE)
def test_seed(name):
    quiet(seed_test, lambda: games.make(name), num_cycles=100)


@pytest.mark.parametrize("name", SIMULTANEOUS)
def test_parallel_api(name):
    quiet(parallel_api_test, games.make_parallel(name), num_cycles=200)


def test_enough_openspiel_games_through_the_bridge():
    assert len(set(BRIDGE_GAMES)) >= 20


@pytest.mark.parametrize("game", BRIDGE_GAMES)
def test_bridge_api(game):
    env = games.make(f"openspiel:{game}")
    quiet(api_test, env, num_cycles=50)
    if env.info.dynamics == "simultaneous":
        quiet(parallel_api_test, games.make_parallel(f"openspiel:{game}"), num_cycles=50)


def random_decisions(name, seeds, max_turns=300):
    """Yield (env, agent) at every decision of random playouts (the env is live: use it now)."""
    for seed in seeds:
        env = games.make(name)
        env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for _turn, agent in enumerate(env.agent_iter(max_turns)):
            _, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
                continue
            yield env, agent
            view = env.view(agent)
            env.step(
                "hi, let's cooperate"
                if view.free_text
                else view.actions[rng.integers(len(view.actions))]
            )
        yield env, None  # the final state


def reply_styles(move):
    return [
        f"[{move}]",
        f"\\boxed{{{move}}}",
        f"<answer>{move}</answer>",
        move,
        f"  {move.upper()}.  ",
        f"<think>Let me weigh the options.</think>\nMy move: [{move}]",
    ]


@pytest.mark.parametrize("name", CATALOGUE)
def test_text_layer_renders_and_every_legal_move_parses_back(name):
    seen_moves = 0
    for env, agent in random_decisions(name, seeds=range(6)):
        for seat in env.possible_agents:
            view = env.view(seat)
            prompt = view.prompt()
            assert isinstance(prompt, str) and view.rules and view.state
            assert view.rules in prompt and view.state in prompt
            if agent is None or seat != agent:
                continue
            if view.free_text:
                assert view.legal_moves == [] and view.max_chars > 0
                continue
            assert view.legal_moves and len(view.legal_moves) == len(view.actions)
            normal = [normalize(m) for m in view.legal_moves]
            assert len(set(normal)) == len(normal), (
                f"{name}: moves not distinct: {view.legal_moves}"
            )
            for move, action in zip(view.legal_moves, view.actions):
                for reply in reply_styles(move):
                    assert env.parse(seat, reply) == action, (name, reply)
                seen_moves += 1
    assert seen_moves > 0


@pytest.mark.parametrize("name", OPENSPIEL_CATALOGUE)
def test_no_move_is_a_whole_word_part_of_another(name):
    """So that a reply mentioning one move never also 'mentions' a shorter one."""
    for env, agent in random_decisions(name, seeds=range(4)):
        if agent is None:
            continue
        normal = [normalize(m) for m in env.legal_moves(agent)]
        for a in normal:
            for b in normal:
                if a != b:
                    assert not re.search(rf"(?<!\w){re.escape(a)}(?!\w)", b), (name, a, b)


@pytest.mark.parametrize("name", OPENSPIEL_CATALOGUE)
def test_action_ids_are_openspiel_ids(name):
    """The action mask is exactly pyspiel's legal actions, and the text moves name them."""
    for env, agent in random_decisions(name, seeds=range(3)):
        if agent is None or not env.legal_actions(agent):
            continue
        player = env.possible_agents.index(agent)
        mask = env.observe(agent)["action_mask"]
        assert list(np.flatnonzero(mask)) == sorted(env.state.legal_actions(player))
        assert env.legal_actions(agent) == list(env.state.legal_actions(player))


def test_hanabi_presets_follow_mars():
    mini, small = games.make("hanabi_mini"), games.make("hanabi")
    assert mini.game.get_parameters() == {
        "players": 2,
        "colors": 2,
        "ranks": 2,
        "hand_size": 3,
        "max_information_tokens": 3,
        "max_life_tokens": 3,
    }
    assert small.game.get_parameters() == {
        "players": 2,
        "colors": 3,
        "ranks": 2,
        "hand_size": 5,
        "max_information_tokens": 8,
        "max_life_tokens": 3,
    }
    assert games.make("hanabi", ranks=3).game.get_parameters()["ranks"] == 3


@pytest.mark.parametrize(
    "name, params, message",
    [
        ("hanabi", {"preset": "huge"}, "unknown hanabi preset"),
        ("hanabi", {"players": 3}, "two-player"),
        ("goofspiel", {"players": 3}, "two-player"),
        ("liars_dice", {"players": 3}, "cannot load OpenSpiel game"),
        ("goofspiel", {"no_such_param": 1}, "cannot load OpenSpiel game"),
    ],
)
def test_bad_parameters_give_a_one_line_value_error(name, params, message):
    with pytest.raises(ValueError, match=message):
        games.make(name, **params)


def _replayed(name: str, seed: int, actions: list):
    env = games.make(name)
    env.reset(seed=seed)
    for action in actions:
        env.step(action)
    return env


@pytest.mark.parametrize(
    "name", ["tic_tac_toe", "connect_four", "kuhn_poker", "leduc_poker", "goofspiel", "liars_dice"]
)
def test_the_legal_moves_and_view_an_env_keeps_are_those_of_a_fresh_replay(name):
    """The env reads its legal moves once per state (and a move's text once per env where it
    depends on the action alone): at every decision they, the view and the moves of every
    other player are those of a fresh env replayed to the same point."""
    rng = np.random.default_rng(0)
    for seed in range(3):
        env, actions = games.make(name), []
        env.reset(seed=seed)
        for agent in env.agent_iter():
            if env.terminations[agent] or env.truncations[agent]:
                env.step(None)
                actions.append(None)
                continue
            fresh = _replayed(name, seed, actions)
            for other in env.possible_agents:
                assert env.legal_moves(other) == fresh.legal_moves(other)
                assert env.legal_actions(other) == fresh.legal_actions(other)
            assert env.view(agent) == fresh.view(agent)
            env.legal_actions(agent).clear()  # a copy: the env's own list stays whole
            legal = env.legal_actions(agent)
            assert legal == fresh.legal_actions(agent)
            action = legal[int(rng.integers(len(legal)))]
            assert env.parse(agent, f"[{env.move_text(agent, action)}]") == action
            env.step(action)
            actions.append(action)


def test_an_illegal_move_or_a_buffered_one_empties_that_players_moves():
    env = games.make("tic_tac_toe")
    env.reset(seed=0)
    x, o = env.possible_agents
    assert env.legal_moves(x) == [str(i) for i in range(9)]
    env.step(4)
    assert env.legal_moves(x) == [] and "4" not in env.legal_moves(o)
    env.step(4)  # taken: o loses, the game is over
    assert env.terminations[o] and env.legal_moves(o) == [] and env.legal_moves(x) == []
    sim = games.make("goofspiel")
    sim.reset(seed=0)
    first, second = sim.possible_agents
    theirs = sim.legal_moves(second)
    sim.step(sim.legal_actions(first)[0])  # buffered until the other bids
    assert sim.legal_moves(first) == [] and sim.legal_moves(second) == theirs


def test_the_generator_is_built_on_first_use_from_the_reset_seed():
    """A game without chance never builds it; a game with chance deals from gymnasium's
    `seeding.np_random(seed)` stream, as an independent replay of OpenSpiel's chance shows."""
    import pyspiel
    from gymnasium.utils import seeding

    env = games.make("tic_tac_toe")
    env.reset(seed=3)
    assert env._np_random is None
    env = games.make("leduc_poker")
    env.reset(seed=3)
    rng, _ = seeding.np_random(3)
    state, deals = pyspiel.load_game("leduc_poker").new_initial_state(), []
    while state.is_chance_node():
        outcomes, probs = zip(*state.chance_outcomes())
        deals.append(outcomes[rng.choice(len(outcomes), p=probs)])
        state.apply_action(deals[-1])
    assert [a for p, a in env.moves if p == -1] == deals


def test_leduc_state_text_merges_information_states_that_the_history_tells_apart():
    """Leduc's state text names the pot, not the betting that built it (its docstring): fewer
    distinct texts than information states up to suit. With the move history added (what
    `prompt: compact` shows) the texts tell apart exactly OpenSpiel's information states with
    the suit dropped (card id // 2 is the rank)."""
    import pyspiel

    def rank_only(info: str) -> str:
        return re.sub(r"\[(Private|Public): (\d)\]", lambda m: f"[{m[1]}: {int(m[2]) // 2}]", info)

    game = pyspiel.load_game("leduc_poker")
    by_rank, state_texts, compact_texts = set(), set(), set()
    stack = [game.new_initial_state()]
    while stack:
        state = stack.pop()
        if state.is_terminal():
            continue
        stack.extend(state.child(a) for a in state.legal_actions())
        if state.is_chance_node():
            continue
        player = state.current_player()
        env = games.make("leduc_poker")
        env.reset(seed=0, options={"history": state.history()})
        agent = env.agent_selection
        view = env.view(agent)
        by_rank.add(rank_only(state.information_state_string(player)))
        state_texts.add(view.state)
        compact_texts.add((tuple(env.history_text(agent)), view.state))
    assert len(state_texts) < len(by_rank)
    assert len(compact_texts) == len(by_rank)
