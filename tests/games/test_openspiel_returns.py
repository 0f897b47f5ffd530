"""Final rewards of the OpenSpiel catalogue games equal pyspiel's `returns()`, and illegal
actions end the game as documented (offender -1, everyone else 0)."""

import numpy as np
import pyspiel
import pytest

import games

OPENSPIEL_CATALOGUE = [n for n in games.names() if games.info(n).source == "openspiel"]
PLAYOUTS = 300


def replay(env) -> pyspiel.State:
    """A fresh pyspiel state with the env's recorded moves applied (chance, single, joint)."""
    state = env.game.new_initial_state()
    for player, action in env.moves:
        if player == -2:
            state.apply_actions(action)
        else:
            state.apply_action(action)
    return state


def random_playout(env, seed):
    """Play masked random actions; return each agent's summed rewards (as received per step)."""
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    total = {a: 0.0 for a in env.possible_agents}
    for agent in env.agent_iter():
        obs, reward, term, trunc, _ = env.last()
        total[agent] += reward
        if term or trunc:
            env.step(None)
            continue
        env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
    return total


@pytest.mark.parametrize("name", OPENSPIEL_CATALOGUE)
def test_summed_rewards_equal_pyspiel_returns(name):
    env = games.make(name)
    nonzero = 0
    for seed in range(PLAYOUTS):
        total = random_playout(env, seed)
        state = replay(env)
        assert state.is_terminal()
        returns = state.returns()
        for i, agent in enumerate(env.possible_agents):
            assert total[agent] == pytest.approx(returns[i]), (name, seed, total, returns)
        nonzero += any(returns)
    assert nonzero > PLAYOUTS // 10  # the check is not vacuous: real payoffs were compared


def test_seeded_playouts_repeat_and_differ_across_seeds():
    env = games.make("leduc_poker")
    random_playout(env, 7)
    first = list(env.moves)
    random_playout(env, 7)
    assert env.moves == first
    random_playout(env, 8)
    assert env.moves != first


def find_deal(name, wanted, actions=(), seeds=5000):
    """An env whose chance outcomes are `wanted` once `actions` are played (searched over seeds)."""
    env = games.make(name)
    for seed in range(seeds):
        env.reset(seed=seed)
        for action in actions:
            env.step(action)
        if [a for p, a in env.moves if p == -1] == list(wanted):
            return env
    raise AssertionError(f"no seed deals {wanted}")


def play(env, actions):
    for action in actions:
        env.step(action)
    return [env._cumulative_rewards[a] for a in env.possible_agents]


def test_kuhn_hand_computed():
    # player_0 holds K (2), player_1 holds J (0): Bet, Bet -> showdown, K wins ante + bet.
    assert play(find_deal("kuhn_poker", [2, 0]), [1, 1]) == [2.0, -2.0]
    # Pass, Bet, Pass: player_0 folds to the bet and loses the ante only.
    assert play(find_deal("kuhn_poker", [2, 0]), [0, 1, 0]) == [-1.0, 1.0]


def test_leduc_hand_computed():
    # player_0 J (card 0), player_1 K (card 5), public Q (card 3). Round 1: Raise, Raise,
    # Call (5 each); round 2: Call, Raise, Raise, Call (+8 each): player_1's K wins 13.
    env = find_deal("leduc_poker", [0, 5, 3], actions=[2, 2, 1])
    assert play(env, [1, 2, 2, 1]) == [-13.0, 13.0]


def test_liars_dice_hand_computed():
    # Dice 6 (wild) and 3: the bid "2 x 3" holds, so the Liar caller (player_1) loses.
    env = find_deal("liars_dice", [5, 2])
    bid = env.legal_actions()[env.legal_moves().index("2 x 3")]
    env.step(bid)
    assert env.legal_moves()[-1] == "Liar"
    assert play(env, [env.legal_actions()[-1]]) == [1.0, -1.0]


def test_goofspiel_hand_computed():
    # Descending prizes 3, 2, 1: player_0 bids 3 then 1, player_1 bids 1 then 3 (actions are
    # value - 1); the last cards (2 and 2) tie. Points 3 vs 2: player_0 wins.
    env = games.make("goofspiel", num_cards=3, points_order="descending")
    env.reset(seed=0)
    assert play(env, [2, 0, 0, 2]) == [1.0, -1.0]


def live_states(name, count=20):
    """Envs stopped at a random decision point of different seeded playouts."""
    out = []
    for seed in range(count):
        env = games.make(name)
        rng = np.random.default_rng(seed)
        random_playout(env, seed)
        played = [
            a for p, a in env.moves if p != -1
        ]  # a joint move (simultaneous) is one step per player
        steps = [a for move in played for a in (move if isinstance(move, list) else [move])]
        env.reset(seed=seed)
        for action in steps[: rng.integers(len(steps))]:
            env.step(action)
        out.append(env)
    return out


@pytest.mark.parametrize("name", OPENSPIEL_CATALOGUE)
@pytest.mark.parametrize("bad", ["out_of_range", "masked", "none"])
def test_illegal_action_penalises_the_offender_and_ends_the_game(name, bad):
    if bad == "masked" and name == "kuhn_poker":
        pytest.skip("both Kuhn actions are legal at every decision")
    tested = 0
    for env in live_states(name):
        offender = env.agent_selection
        legal = set(env.legal_actions())
        if bad == "out_of_range":
            action = env.num_actions + 3
        elif bad == "none":
            action = None
        else:
            masked = [a for a in range(env.num_actions) if a not in legal]
            if not masked:
                continue
            action = masked[0]
        env.step(action)
        assert env.rewards[offender] == -1.0
        assert all(env.rewards[a] == 0.0 for a in env.agents if a != offender)
        assert all(env.terminations.values())
        assert env.infos[offender]["illegal_move"]["agent"] == offender
        # The game is over: every agent is stepped out with None, nothing crashes.
        for _agent in env.agent_iter():
            env.step(None)
        assert env.agents == []
        tested += 1
    assert tested > 0


def test_illegal_second_bid_in_simultaneous_turn_leaves_first_bidder_at_zero():
    env = games.make("goofspiel")
    env.reset(seed=0)
    env.step(env.legal_actions()[0])  # player_0 bids; buffered
    assert env.agent_selection == "player_1"
    env.step(999)
    assert env.rewards == {"player_0": 0.0, "player_1": -1.0}
    assert all(env.terminations.values())
