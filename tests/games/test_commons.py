"""commons: the fishery's rules by hand, its sustainable optimum against brute force, the
PettingZoo API, what each player may see, parsing, and the bots end to end."""

import contextlib
import io
import itertools
import warnings

import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test

import games
from agents import check_spec, make_agent
from agents.base import WrongGame
from arena.runner import plan_matches, play
from games.commons import share_out, sustainable_optimum
from games.parsing import ParseError


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def caught(env) -> int:
    """All the players' catches so far."""
    return sum(sum(r.catches) for r in env.results)


def harvest_round(env, asks):
    """Play one round: no messages (if there is a discussion), then `asks` in seat order."""
    if env.phase == "discussion":
        for _ in env.possible_agents:
            env.step(env.SILENT)
    for a in asks:
        env.step(a)


# --- rules by hand ---------------------------------------------------------------------


def test_regrowth_is_logistic_rounded_down_and_capped():
    rules = games.make("commons").rules  # K = 100, r = 1
    assert rules.regrow(50) == 75  # 50 + 50 x 50 / 100
    assert rules.regrow(52) == 76  # 52 + floor(24.96)
    assert rules.regrow(13) == 24  # 13 + floor(11.31)
    assert rules.regrow(100) == 100 and rules.regrow(0) == 0
    doubling = games.make("commons", growth=2.0).rules
    assert doubling.regrow(50) == 100  # GovSim's K / 2 -> K
    assert doubling.regrow(60) == 100  # 60 + 48, capped at K
    assert doubling.regrow(10) == 28  # 10 + 2 x 10 x 90 / 100


def test_sustainable_level_and_share():
    rules = games.make("commons").rules
    assert rules.sustainable_level == 50  # regrowth 25, the most of any level
    assert rules.sustainable_share(100) == 12  # floor(50 / 4)
    assert rules.sustainable_share(76) == 6 and rules.sustainable_share(40) == 0
    assert games.make("commons", num_players=8).rules.sustainable_share(100) == 6
    small = games.make("commons", capacity=1000, max_harvest=30).rules
    assert small.sustainable_share(1000) == 30  # capped at max_harvest


@pytest.mark.parametrize(
    "asks, stock, expected",
    [
        ((1, 2, 3), 100, (1, 2, 3)),  # they fit: everyone gets its ask
        ((10, 20, 30), 30, (5, 10, 15)),  # exact halves
        ((25, 25, 25, 25), 10, (3, 3, 2, 2)),  # 2.5 each: the two spare tons to the lower seats
        ((7, 3, 0), 5, (4, 1, 0)),  # 3.5 and 1.5: remainders tie, seat 0 first; 0 asks get 0
        ((25, 12, 25, 0), 43, (18, 8, 17, 0)),  # 17.34, 8.32, 17.34: remainders 21, 20, 21 of 62
    ],
)
def test_proportional_shares_conserve_the_stock(asks, stock, expected):
    got = share_out(asks, stock)
    assert got == expected
    assert sum(got) == min(stock, sum(asks)) and all(c <= a for c, a in zip(got, asks))


def test_two_sustainable_rounds_by_hand():
    env = games.make("commons")
    env.reset(seed=0)
    harvest_round(env, [12, 12, 12, 12])  # 100 - 48 = 52 left, regrows to 76
    assert env.stock == 76 and env._cumulative_rewards["player_2"] == 12.0
    harvest_round(env, [6, 5, 7, 6])  # 76 - 24 = 52 -> 76
    assert env.stock == 76 and len(env.results) == 2
    assert [r.catches for r in env.results] == [(12, 12, 12, 12), (6, 5, 7, 6)]
    assert not any(env.terminations.values())
    assert env.cooperation_history("player_0") == [
        (True, (True, True, True)),
        (True, (True, False, True)),  # player_2 asked 7 > 6, its share at 76
    ]


def test_scaled_asks_empty_the_lake_and_it_collapses_for_good():
    env = games.make("commons", initial_stock=10)
    env.reset(seed=0)
    harvest_round(env, [25, 25, 25, 25])
    last = env.results[-1]
    assert last.catches == (3, 3, 2, 2) and last.left == 0 and last.collapsed
    assert env.stock == 0 and all(env.terminations.values())
    assert env.rewards == {"player_0": 3.0, "player_1": 3.0, "player_2": 2.0, "player_3": 2.0}
    assert "died out in round 1" in env.view("player_3").state


def test_a_catch_leaving_less_than_the_threshold_collapses():
    env = games.make("commons", discussion=False, collapse_threshold=20)
    env.reset(seed=0)
    harvest_round(env, [20, 20, 20, 20])  # 20 left: not below 20, regrows to 36
    assert env.stock == 36 and not env.results[-1].collapsed
    harvest_round(env, [5, 5, 5, 5])  # 16 left < 20
    assert env.results[-1].collapsed and env.results[-1].next_stock == 0
    assert all(env.terminations.values()) and len(env.results) == 2


def test_the_game_ends_after_its_rounds():
    env = games.make("commons", rounds=3, discussion=False)
    env.reset(seed=0)
    for _ in range(3):
        assert not any(env.terminations.values())
        harvest_round(env, [0, 0, 0, 0])
    assert all(env.terminations.values()) and env.stock == 100
    assert "is over after 3 rounds" in env.view("player_0").state


def test_roles_and_teams():
    env = games.make("commons", num_players=5)
    env.reset(seed=0)
    assert env.roles == {f"player_{i}": "harvester" for i in range(5)}
    assert env.teams == {f"player_{i}": f"player_{i}" for i in range(5)}


# --- the sustainable optimum -----------------------------------------------------------


def test_sustainable_optimum_by_hand():
    # one round: everything the players may take; two rounds: leave L, then take regrow(L):
    # 100 - L + L + floor(L (100 - L) / 100) is largest at L = 50: 50 + 75 = 125
    assert sustainable_optimum({"rounds": 1}) == 100
    assert sustainable_optimum({"rounds": 1, "num_players": 3}) == 75  # 3 x 25
    assert sustainable_optimum({"rounds": 2}) == 125
    # the default: 50, then 25 a round from 75 down to 50 (rounds 2-11), then all 75
    assert sustainable_optimum() == 50 + 10 * 25 + 75


def _best_over_totals(params: dict) -> int:
    """The best total catch over every schedule of round totals, each played in a fresh env
    (asks spread over the players, each at most max_harvest)."""
    env = games.make("commons", **params)
    n, cap = env.num_players, env.max_harvest
    best = 0

    def spread(total):
        return [total // n + (p < total % n) for p in range(n)]

    def walk(prefix):
        nonlocal best
        env.reset(seed=0)
        for h in prefix:
            harvest_round(env, spread(h))
        best = max(best, caught(env))
        if env.agents and not all(env.terminations.values()):
            for h in range(min(env.stock, n * cap) + 1):
                walk([*prefix, h])

    walk([])
    return best


@pytest.mark.parametrize(
    "params",
    [
        dict(num_players=3, rounds=4, capacity=10, max_harvest=2, collapse_threshold=2),
        dict(num_players=3, rounds=3, capacity=12, initial_stock=7, growth=1.7, max_harvest=4),
        dict(num_players=4, rounds=4, capacity=9, growth=2.0, collapse_threshold=3, max_harvest=2),
    ],
)
def test_sustainable_optimum_equals_brute_force_over_schedules(params):
    params = {**params, "discussion": False}
    assert sustainable_optimum(params) == _best_over_totals(params)


def test_sustainable_optimum_equals_brute_force_over_every_joint_ask():
    params = dict(num_players=3, rounds=2, capacity=8, max_harvest=2, collapse_threshold=2)
    params["discussion"] = False
    env = games.make("commons", **params)
    best = 0
    for first, second in itertools.product(itertools.product(range(3), repeat=3), repeat=2):
        env.reset(seed=0)
        harvest_round(env, first)
        if not env.results[-1].collapsed:
            harvest_round(env, second)
        best = max(best, caught(env))
    assert sustainable_optimum(params) == best


# --- the PettingZoo API ----------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 8])
def test_api_and_seed(n):
    quiet(api_test, games.make("commons", num_players=n), num_cycles=300)
    quiet(seed_test, lambda: games.make("commons", num_players=n), num_cycles=100)


def test_without_discussion_it_is_parallelizable():
    assert not games.make("commons").metadata["is_parallelizable"]
    quiet(parallel_api_test, games.make_parallel("commons", discussion=False), num_cycles=100)


@pytest.mark.parametrize(
    "params, message",
    [
        (dict(num_players=2), "num_players must be an integer in 3..8"),
        (dict(num_players=9), "num_players"),
        (dict(rounds=0), "rounds must be"),
        (dict(initial_stock=101), "initial_stock"),
        (dict(growth=-1.0), "growth"),
        (dict(collapse_threshold=101), "collapse_threshold"),
        (dict(max_harvest=0), "max_harvest"),
        (dict(discussion="yes"), "discussion"),
        (dict(max_message_chars=0), "max_message_chars"),
    ],
)
def test_bad_parameters_give_one_line_errors(params, message):
    with pytest.raises(ValueError, match=message) as e:
        games.make("commons", **params)
    assert "\n" not in str(e.value)


# --- what each player sees -------------------------------------------------------------


def seen(env, agent):
    """Everything a player gets: its prompt, its observation vector and mask."""
    obs = env.observe(agent)
    return env.view(agent).prompt(), obs["observation"].tobytes(), obs["action_mask"].tobytes()


@pytest.mark.parametrize("n", [3, 5])
def test_nobody_sees_a_pending_ask(n):
    """After seats 0..k-1 asked, seats k.. see the same whatever they asked; and a seat that
    asked sees only its own ask."""
    for k in range(1, n):
        views = {}
        for asks in itertools.product([0, 7, 25], repeat=k):
            env = games.make("commons", num_players=n, rounds=3)
            env.reset(seed=0)
            harvest_round(env, [1] * n)  # a past round: public
            harvest_round(env, asks)
            for seat in env.possible_agents[k:]:
                views.setdefault(seat, set()).add(seen(env, seat))
            for j in range(k):  # its own ask shows, the others' do not
                own = seen(env, f"player_{j}")
                views.setdefault((j, asks[j]), set()).add(own)
                assert f"You asked for {asks[j]} tons" in own[0]
        assert all(len(v) == 1 for v in views.values()), k


def test_messages_are_public_and_asks_public_after_the_round():
    env = games.make("commons", rounds=3)
    env.reset(seed=0)
    env.step("I will take 12.")
    env.step(env.SILENT)
    for seat in env.possible_agents:
        state = env.view(seat).state
        assert ('player_0 said: "I will take 12."' in state) == (seat != "player_0")
        assert ("player_1 sent no message." in state) == (seat != "player_1")
    assert 'you said: "I will take 12."' in env.view("player_0").state
    env.step("Me too.")
    env.step("ok")
    for a in (12, 20, 3, 9):
        env.step(a)
    view = env.view("player_2")
    assert "Round 1: 100 tons; caught: you 3, player_0 12, player_1 20, player_3 9;" in view.state
    assert 'Round 1: player_0 said: "I will take 12."' in view.history
    assert "Round 1: player_1 sent no message." in view.history
    assert "Messages this round" not in view.state  # a new round, nothing said yet


def test_scaled_asks_are_shown_beside_the_catches():
    env = games.make("commons", initial_stock=10, rounds=2)
    env.reset(seed=0)
    harvest_round(env, [25, 25, 25, 25])
    state = env.view("player_1").state
    assert "caught: you 3, player_0 3, player_2 2, player_3 2 (asked: you 25," in state


# --- parsing and illegal moves ---------------------------------------------------------


def test_parsing_asks_strictly():
    env = games.make("commons", discussion=False)
    env.reset(seed=0)
    assert env.parse("player_0", "I'll take [7].") == 7
    assert env.parse("player_0", "<answer>25</answer>") == 25
    for reply in ("[26]", "[-3]", "[2.5]", "[seven]", "", "[100]"):
        with pytest.raises(ParseError):
            env.parse("player_0", reply)


def test_messages_are_free_text_bounded_and_silent_is_the_only_discrete_move():
    env = games.make("commons", max_message_chars=10)
    env.reset(seed=0)
    view = env.view("player_0")
    assert view.free_text and view.max_chars == 10 and view.legal_moves == []
    assert env.legal_actions("player_0") == [env.SILENT]
    assert env.parse("player_0", "<think>hmm</think> We should all take five tons.") == (
        "We should "
    )
    with pytest.raises(ParseError):
        env.parse("player_0", "   ")
    env.step("x" * 50)
    assert env.messages[-1] == [(0, "x" * 10)]
    env.step("a\nRound 9:  b")  # a newline cannot start a line of its own in the history
    assert env.messages[-1][1] == (1, "a Round 9:")


@pytest.mark.parametrize(
    "prefix, bad",
    [
        ([], 5),  # an ask during the discussion
        (["hi", "hi", "hi", "hi"], "five"),  # a message during the harvest
        (["hi", "hi", "hi", "hi"], 26),  # above max_harvest
        (["hi", "hi", "hi", "hi", 3], 26),  # SILENT is not an ask
        ([], None),
    ],
)
def test_illegal_moves_penalise_the_offender_and_end_the_game(prefix, bad):
    env = games.make("commons")
    env.reset(seed=0)
    for a in prefix:
        env.step(a)
    offender = env.agent_selection
    env.step(bad)
    assert all(env.terminations.values())
    assert env._cumulative_rewards[offender] == -1.0
    assert all(r == 0.0 for a, r in env._cumulative_rewards.items() if a != offender)
    assert "illegal move" in env.view(offender).state


# --- bots ------------------------------------------------------------------------------


def _play(specs, n, **params):
    names = list(dict.fromkeys(specs))
    agents = {s: make_agent(s) for s in names}
    plans = plan_matches("commons", names, 2, params={"num_players": n, **params})
    for p in plans:  # plan_matches seats the catalogue's 4 players: reseat for n
        p.seats = [specs[i % len(specs)] for i in range(n)]
    return list(play(plans, agents))


@pytest.mark.parametrize("n", [3, 8])
def test_sustainable_bots_survive_every_round(n):
    for rec in _play(["sustainable"], n):
        assert rec.error is None
        env = _replayed(rec)
        assert len(env.results) == 12 and not any(r.collapsed for r in env.results)
        assert min(r.left for r in env.results) >= 50
        said = [t.move for t in rec.turns if isinstance(t.action, str)]
        asked = [t.action for t in rec.turns if not isinstance(t.action, str)]
        assert said == [f"I will take {a}." for a in asked]  # honest: says what it takes


@pytest.mark.parametrize("n, rounds", [(3, 2), (4, 1), (8, 1)])
def test_greedy_bots_collapse_the_stock_early(n, rounds):
    """3 ask 75 of 100: 25 left regrow to 43, then 75 asked of 43 takes it all; 4 or more ask
    at least 100 in round 1."""
    for rec in _play(["greedy"], n):
        env = _replayed(rec)
        assert len(env.results) == rounds and env.results[-1].collapsed


def test_random_and_social_bots_play_it():
    for rec in _play(["random", "tit_for_tat", "greedy", "always_cooperate"], 4):
        assert rec.error is None and rec.turns
    (first,) = [rec for rec in _play(["tit_for_tat", "greedy", "greedy"], 3, rounds=3)][:1]
    env = _replayed(first)
    tft = [t.action for t in first.turns if t.player == "player_0"]
    assert tft[:2] == ["I will take 16.", 16]  # cooperates first: floor(50 / 3)
    assert env.cooperation_history("player_0")[0] == (True, (False, False))


def test_commons_bots_refuse_other_games_before_any_match():
    with pytest.raises(WrongGame, match="plays commons only") as e:
        check_spec("sustainable", [("tic_tac_toe", {})])
    assert "\n" not in str(e.value)
    check_spec("greedy", [("commons", {"num_players": 6})])
    check_spec("tit_for_tat", [("commons", {})])  # the social bots know commons


def _replayed(rec):
    from evaluation.social import replay

    return replay(rec)
