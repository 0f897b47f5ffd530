"""Werewolf: the rules by hand-worked matches, the PettingZoo API, what each player may see,
strict parsing, the scripted bots end to end, and `arena play` / `arena tournament` on it."""

import contextlib
import io
import itertools
import warnings

import pytest
import yaml
from pettingzoo.test import api_test, seed_test

import games
from agents import check_spec, make_agent
from agents.base import WrongGame
from arena.runner import MatchPlan, play
from cli.main import main as arena_main
from games.parsing import ParseError

W, S, D, V = "werewolf", "seer", "doctor", "villager"
SIX = [W, W, S, D, V, V]  # seats 0-1 wolves, 2 seer, 3 doctor, 4-5 villagers
EIGHT = [W, W, S, D, V, V, V, V]


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def dealt(roles, **params):
    env = games.make("werewolf", num_players=len(roles), **params)
    env.reset(seed=0, options={"roles": roles})
    return env


def steps(env, *actions):
    """Play `actions` in turn order, checking the mover's legal moves first (a str: a message)."""
    for a in actions:
        assert isinstance(a, str) or a in env.legal_actions(env.agent_selection), (a, env.phase)
        env.step(a)


def night(env, wolf_picks, inspect=None, protect=None):
    steps(env, *wolf_picks, *[x for x in (inspect, protect) if x is not None])


def day(env, votes, message="hello"):
    """One discussion round (everyone says `message`) and the votes (None: abstain)."""
    living = env.living()
    steps(env, *[message] * (len(living) * env.discussion_rounds))
    steps(env, *[env.ABSTAIN if v is None else v for v in votes])


def returns(env):
    return {a: env._cumulative_rewards[a] for a in env.possible_agents}


# --- catalogue, params, API ---------------------------------------------------------------
def test_catalogue_entry_and_roles_by_player_count():
    info = games.info("werewolf")
    assert (info.num_players, info.source, info.split, info.dynamics) == (
        6,
        "native",
        "extra",
        "mixed",
    )
    for n, wolves in ((5, 1), (6, 2), (7, 2), (8, 2)):
        env = games.make("werewolf", num_players=n)
        env.reset(seed=n)
        assert sorted(env.roles.values()) == sorted([W] * wolves + [S, D] + [V] * (n - wolves - 2))
        assert env.teams == {a: "wolves" if r == W else "village" for a, r in env.roles.items()}
    dealt_roles = set()
    for seed in range(20):
        env = games.make("werewolf")
        env.reset(seed=seed)
        dealt_roles.add(tuple(env.roles.values()))
    assert len(dealt_roles) > 10  # the deal is random


@pytest.mark.parametrize(
    "params, message",
    [
        ({"num_players": 4}, "num_players must be an integer in 5..8"),
        ({"num_players": 9}, "num_players must be an integer in 5..8"),
        ({"num_players": 5, "werewolves": 3}, "werewolves must be an integer in 1..2"),
        ({"seers": 2}, "seers must be an integer in 0..1"),
        ({"max_message_chars": 0}, "max_message_chars must be an integer"),
        ({"max_days": 0}, "max_days must be an integer in 1..100"),
        ({"reveal_roles": "yes"}, "reveal_roles must be true or false"),
    ],
)
def test_bad_parameters_are_one_line_errors(params, message):
    with pytest.raises(ValueError, match=message) as e:
        games.make("werewolf", **params)
    assert "\n" not in str(e.value)


def test_fixed_roles_must_be_the_deck():
    env = games.make("werewolf")
    with pytest.raises(ValueError, match="roles must be a permutation"):
        env.reset(seed=0, options={"roles": [W, W, W, S, D, V]})


@pytest.mark.parametrize(
    "params",
    [
        {"num_players": 5},
        {"num_players": 8},
        {"num_players": 8, "werewolves": 3, "reveal_roles": False, "discussion_rounds": 2},
    ],
)
def test_api_and_seed(params):
    quiet(api_test, games.make("werewolf", **params), num_cycles=300)
    quiet(seed_test, lambda: games.make("werewolf", **params), num_cycles=200)


# --- rules, hand-worked -------------------------------------------------------------------
def test_night_kill_is_announced_with_the_role_and_the_dead_take_no_turns():
    env = dealt(SIX)
    assert env.agent_selection == "player_0" and env.legal_actions() == [2, 3, 4, 5]
    night(env, [4, 4], inspect=0, protect=3)
    assert env.alive == [True, True, True, True, False, True]
    assert env.phase == "discussion" and env.agent_selection == "player_0"
    line = "Day 1: player_4 was killed in the night; player_4 was a villager."
    for seat in env.possible_agents:
        assert line in env.history_text(seat)
    steps(env, "a", "b", "c", "d")  # players 0, 1, 2, 3
    assert env.agent_selection == "player_5"  # player_4 is skipped
    steps(env, "e")
    assert env.phase == "vote" and env.legal_actions("player_0") == [1, 2, 3, 5, env.ABSTAIN]


def test_roles_stay_secret_without_reveal_roles():
    env = dealt(SIX, reveal_roles=False)
    night(env, [4, 4], inspect=0, protect=3)
    assert "Day 1: player_4 was killed in the night." in env.history_text("player_5")
    assert "villager" not in env.state_text("player_5").split("\n", 2)[2]  # past own role line


def test_doctor_save_and_the_first_wolf_breaks_a_tie():
    env = dealt(SIX)
    night(env, [4, 5], inspect=0, protect=4)  # the wolves disagree: the first wolf's pick, 4
    assert "Night 1: the werewolves' victim is player_4." in env.history_text("player_1")
    assert all(env.alive) and "Day 1: nobody died in the night." in env.history_text("player_5")
    eight = dealt([W, W, W, S, D, V, V, V], werewolves=3)
    night(eight, [5, 6, 6], inspect=0, protect=3)  # most named: 6
    assert not eight.alive[6] and eight.alive[5]


def test_a_later_wolf_sees_the_earlier_pick_nobody_else_does():
    env = dealt(SIX)
    steps(env, 5)
    assert "Tonight so far: player_0 named player_5." in env.state_text("player_1")
    assert "Night 1: werewolf player_0 named player_5 as the victim." in env.history_text(
        "player_1"
    )
    for seat in ("player_2", "player_3", "player_4", "player_5"):
        view = env.view(seat)
        assert "named player_5" not in "\n".join([view.state, *view.history])


def test_the_seer_alone_learns_its_finding():
    env = dealt(SIX)
    night(env, [4, 4], inspect=0, protect=3)
    assert "Night 1: you inspected player_0: a werewolf." in env.history_text("player_2")
    assert "Your findings: player_0 is a werewolf." in env.state_text("player_2")
    assert env.known("player_2") == {2: False, 0: True, 4: False}
    for seat in ("player_0", "player_1", "player_3", "player_5"):
        view = env.view(seat)
        assert "inspected" not in "\n".join([view.state, *view.history])
        assert "findings" not in view.state
    assert "Night 1: you protected player_3." in env.history_text("player_3")
    assert "protected" not in "\n".join(env.history_text("player_2"))


def test_a_tie_eliminates_nobody_and_votes_are_public_afterwards():
    env = dealt(SIX)
    night(env, [4, 4], inspect=0, protect=3)
    day(env, [2, 3, 0, 0, 2])  # players 0, 1, 2, 3, 5: two for 2, two for 0
    assert env.alive == [True, True, True, True, False, True]
    line = (
        "Day 1 vote: player_0 voted player_2, player_1 voted player_3, player_2 voted player_0, "
        "player_3 voted player_0, player_5 voted player_2; a tie or no votes: nobody is eliminated."
    )
    assert line in env.history_text("player_4")  # the dead read on
    assert env.phase == "wolves" and env.day == 2


def test_the_village_wins_when_the_last_wolf_is_voted_out():
    env = dealt([W, S, D, V, V])
    night(env, [3], inspect=0, protect=1)
    day(env, [None, 0, 0, 0])  # players 0, 1, 2, 4
    assert env.winner == "village" and all(env.terminations.values())
    assert returns(env) == {
        "player_0": -1,
        "player_1": 1,
        "player_2": 1,
        "player_3": 1,
        "player_4": 1,
    }
    assert "Game over: the village wins." in env.history_text("player_3")


def test_the_wolves_win_at_parity_after_a_night():
    env = dealt([W, S, D, V, V])
    night(env, [3], inspect=2, protect=2)
    day(env, [4, 4, 4, 0])  # players 0, 1, 2, 4: player_4 (a villager) is voted out
    assert env.phase == "wolves" and env.day == 2
    night(env, [1], inspect=0, protect=2)  # the seer dies: one wolf against the doctor
    assert env.winner == "wolves" and all(env.terminations.values())
    assert returns(env) == {
        "player_0": 1,
        "player_1": -1,
        "player_2": -1,
        "player_3": -1,
        "player_4": -1,
    }


def test_wolves_win_at_parity_after_a_vote():
    env = dealt(SIX)
    night(env, [4, 4], inspect=0, protect=3)
    day(env, [5, 5, 5, 5, 0])  # player_5 voted out: 2 wolves against 2
    assert env.winner == "wolves"


def test_max_days_ends_in_a_draw():
    env = dealt(SIX, max_days=1)
    night(env, [4, 4], inspect=0, protect=4)
    day(env, [None] * 6)
    assert env.winner is None and all(env.terminations.values())
    assert set(returns(env).values()) == {0.0}
    assert "The game is over: a draw after day 1." in env.state_text("player_3")


def test_dead_seer_and_doctor_turns_are_skipped():
    env = dealt(EIGHT)
    night(env, [2, 2], inspect=0, protect=3)  # the seer dies
    day(env, [None] * 7)
    night(env, [3, 3], protect=4)  # no seer turn; the doctor dies
    assert env.phase == "discussion" and not env.alive[3] and env.day == 2
    day(env, [None] * 6)
    steps(env, 4, 4)  # no seer, no doctor: the night ends with the wolves
    assert env.phase == "discussion" and not env.alive[4] and env.day == 3


def test_discussion_rounds_and_messages_are_one_bounded_line():
    env = dealt(SIX, discussion_rounds=2, max_message_chars=10)
    night(env, [4, 4], inspect=0, protect=3)
    steps(env, "line one\nline   two and more", env.SILENT, "x", "y", "z")
    assert env.round == 1 and env.phase == "discussion"
    history = env.history_text("player_5")
    assert 'Day 1, round 1: player_0 said: "line one l"' in history
    assert "Day 1, round 1: player_1 said nothing." in history
    assert env.is_free_text("player_0") and not env.is_free_text("player_1")


def test_illegal_moves_end_the_game_with_the_offender_penalised():
    for bad in (4, 0, "a message", None, 99):  # a dead player, itself, text, None, out of range
        env = dealt(SIX)
        night(env, [4, 4], inspect=0, protect=3)
        steps(env, *["m"] * 5)
        env.step(bad)
        assert all(env.terminations.values()) and returns(env)["player_0"] == -1
        assert set(returns(env).values()) == {-1.0, 0.0}
        assert "illegal move" in env.state_text("player_0")
    env = dealt(SIX)
    env.step(1)  # a wolf names a wolf
    assert returns(env)["player_0"] == -1


# --- parsing --------------------------------------------------------------------------------
def test_choices_parse_strictly():
    env = dealt(SIX)
    night(env, [4, 4], inspect=0, protect=3)
    with pytest.raises(ParseError):  # a message is free text: empty is refused
        env.parse("player_0", "  ")
    assert env.parse("player_0", "x" * 1000) == "x" * 300  # bounded
    steps(env, *["m"] * 5)
    assert env.view("player_0").legal_moves == [
        "player_1",
        "player_2",
        "player_3",
        "player_5",
        "abstain",
    ]
    assert env.parse("player_0", "[player_3]") == 3
    assert env.parse("player_0", "I vote <answer>abstain</answer>") == env.ABSTAIN
    assert env.parse("player_0", "I vote player_5") == 5
    for reply, kind in (
        ("[player_4]", "illegal"),  # dead
        ("[player_0]", "illegal"),  # itself
        ("[player 3]", "illegal"),
        ("player_1 or player_2", "ambiguous"),
        ("nobody", "no_move"),
    ):
        with pytest.raises(ParseError) as e:
            env.parse("player_0", reply)
        assert e.value.kind == kind, reply


# --- what each player may see ---------------------------------------------------------------
def record(roles, policy, **params):
    """Every seat's prompt after every step of the match `policy(env, agent)` plays."""
    env = dealt(roles, **params)
    seen = []
    while not all(env.terminations.values()):
        seen.append({a: env.view(a).prompt() for a in env.possible_agents})
        env.step(policy(env, env.agent_selection))
    seen.append({a: env.view(a).prompt() for a in env.possible_agents})
    return seen


def scripted(picks=None, inspect=0, protect=1):
    """A match of two nights and days on eight seats: the wolves (seats 0, 1) kill 6, then 7;
    the seer inspects `inspect`, the doctor protects `protect` (a wolf: it saves nobody); the
    votes of day 1 eliminate nobody, day 2 all abstain (max_days=2: a draw)."""

    def policy(env, agent):
        i = env.possible_agents.index(agent)
        if env.phase == "wolves":
            return (picks or {}).get((env.day, i), 5 + env.day)
        if env.phase == "seer":
            return inspect if inspect != i else 7
        if env.phase == "doctor":
            return protect
        if env.phase == "discussion":
            return f"I am {agent}, day {env.day}."
        return [1, 0, 3, 2, 5, 4, None, env.ABSTAIN][i] if env.day == 1 else env.ABSTAIN

    return policy


def test_no_prompt_of_a_villager_or_wolf_changes_when_the_other_village_roles_are_permuted():
    """Seats 6 and 7 (villagers, both killed) and the wolves cannot tell who among seats 2-5 is
    the seer or the doctor: their prompts are the same under all 12 deals."""
    runs = {}
    for perm in set(itertools.permutations([S, D, V, V])):
        roles = [W, W, *perm, V, V]
        runs[perm] = record(roles, scripted(), max_days=2)
    (length,) = {len(r) for r in runs.values()}
    for seat in ("player_0", "player_1", "player_6", "player_7"):
        for k in range(length):
            assert len({r[k][seat] for r in runs.values()}) == 1, (seat, k)
    # not vacuous: the seer's own prompt does change with where it sits
    assert len({r[-1]["player_2"] for r in runs.values()}) > 1


def test_wolf_picks_seer_and_doctor_choices_are_private():
    base = record(EIGHT, scripted(), max_days=2)
    other_pick = record(EIGHT, scripted(picks={(1, 1): 7}), max_days=2)  # victim still 6
    other_seer = record(EIGHT, scripted(inspect=4), max_days=2)
    other_doctor = record(EIGHT, scripted(protect=0), max_days=2)
    for k in range(len(base)):
        for seat in range(2, 8):
            a = f"player_{seat}"
            assert base[k][a] == other_pick[k][a], (k, a)
        for seat in (0, 1, 3, 4, 5, 6, 7):  # all but the seer
            a = f"player_{seat}"
            assert base[k][a] == other_seer[k][a], (k, a)
        for seat in (0, 1, 2, 4, 5, 6, 7):  # all but the doctor
            a = f"player_{seat}"
            assert base[k][a] == other_doctor[k][a], (k, a)
    assert base[-1]["player_0"] != other_pick[-1]["player_0"]  # the wolves do see it
    assert base[-1]["player_2"] != other_seer[-1]["player_2"]
    assert base[-1]["player_3"] != other_doctor[-1]["player_3"]


def test_votes_are_secret_until_everyone_has_voted():
    prompts = set()
    for first_vote in (1, 2, 3, 5, None):
        env = dealt(SIX)
        night(env, [4, 4], inspect=0, protect=3)
        steps(env, *["m"] * 5, env.ABSTAIN if first_vote is None else first_vote)
        assert env.agent_selection == "player_1"
        prompts.add(env.view("player_1").prompt())
    assert len(prompts) == 1


def test_a_player_sees_its_own_role_and_a_wolf_its_pack():
    env = dealt(SIX)
    assert "You are player_4, the villager (team village)." in env.state_text("player_4")
    assert "The werewolves: player_0, player_1." in env.state_text("player_1")
    for seat in range(2, 6):
        assert "werewolves:" not in env.state_text(f"player_{seat}")
    obs = env.observe("player_1")["observation"]
    assert list(obs[8 + 6 : 8 + 12]) == [1, 1, 0, 0, 0, 0]  # its pack; the rest unknown
    obs = env.observe("player_4")["observation"]
    assert list(obs[8 + 6 : 8 + 12]) == [0, 0, 0, 0, -1, 0]  # only itself


# --- bots end to end -----------------------------------------------------------------------
def bot_matches(n_players, n_matches=6, seats=None):
    agents = {
        "bot": make_agent("werewolf_heuristic", "bot"),
        "random": make_agent("random", "random"),
    }
    plans = [
        MatchPlan(
            f"m{i}",
            "werewolf",
            seats or ["bot"] * n_players,
            seed=i,
            params={"num_players": n_players},
        )
        for i in range(n_matches)
    ]
    return list(play(plans, agents))


@pytest.mark.parametrize("n", [5, 8])
def test_bots_play_whole_matches_by_the_rules(n):
    from evaluation.social import replay

    records = bot_matches(n)
    moves = [[(t.player, t.move) for t in r.turns] for r in records]
    assert moves == [[(t.player, t.move) for t in r.turns] for r in bot_matches(n)]  # seeded
    for rec in records:
        assert rec.error is None and all(t.valid for t in rec.turns)
        env = replay(rec)
        assert env.phase == "over"
        wolves = env.wolves()
        for e in env.log:
            if e.kind == "vote":  # wolves never vote for each other
                assert not any(v in wolves and t in wolves for v, t in e.votes)
            if e.kind == "pick":
                assert e.target not in wolves
            if e.kind == "message" and env.role_of[e.actor] == "seer":
                found = [x for x in env.log[: env.log.index(e)] if x.kind == "inspect"]
                for x in found:
                    said = f"player_{x.target} is {'' if x.flag else 'not '}a werewolf."
                    assert said in e.text


def test_village_bots_vote_for_a_seer_claim():
    env = dealt(SIX)
    night(env, [4, 4], inspect=0, protect=3)
    bot = make_agent("werewolf_heuristic", "bot")
    import numpy as np

    from agents.base import PendingTurn

    def move(agent):
        [rec] = bot.act([PendingTurn("m", env, agent, np.random.default_rng(0))])
        return rec.action

    msgs = []
    for _ in range(5):
        msgs.append(move(env.agent_selection))
        env.step(msgs[-1])
    assert msgs[2] == "I am the seer. player_0 is a werewolf."
    assert msgs[0] == msgs[1] == "I am a villager."  # player_1 (a wolf) has no seer claim before it
    assert msgs[3] == msgs[4] == "I am a villager. I suspect player_0."
    votes = [move(a) for a in ("player_0",)]
    assert votes == [2]  # the wolf votes for the self-declared seer
    env.step(2)
    assert move("player_1") == 2
    env.step(2)
    assert [move("player_2")] == [0]
    env.step(0)
    assert move("player_3") == 0 and env.legal_actions("player_3")
    env.step(0)
    assert move("player_5") == 0
    env.step(0)
    assert not env.alive[0]


def test_a_bot_refuses_another_game_before_any_match():
    with pytest.raises(WrongGame, match="plays werewolf only") as e:
        check_spec("werewolf_heuristic", [("tic_tac_toe", {})])
    assert "\n" not in str(e.value)
    check_spec("werewolf_heuristic,reveal=false", [("werewolf", {"num_players": 7})])


# --- the CLI -------------------------------------------------------------------------------
def test_arena_play_and_tournament_on_werewolf(tmp_path, capsys):
    out = tmp_path / "ww.jsonl"
    code = arena_main(
        ["play", "werewolf", "--agents", "werewolf_heuristic", "random", "--matches", "4",
         "--param", "num_players=5", "--out", str(out)]
    )  # fmt: skip
    assert code == 0 and "werewolf_heuristic" in capsys.readouterr().out
    assert len(out.read_text().splitlines()) == 4
    cfg = {
        "name": "ww",
        "format": "round_robin",
        "players": {f"h{i}": "werewolf_heuristic" for i in range(5)} | {"r": "random"},
        "games": [{"name": "werewolf", "params": {"num_players": 5}}],
        "games_per_pairing": 2,
    }
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert arena_main(["tournament", str(path), "--db", str(tmp_path / "t.db")]) == 0
    assert "Plackett-Luce" in capsys.readouterr().out
