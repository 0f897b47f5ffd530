"""arena.single_agent: one seat of a game as a gymnasium.Env, the other seats played by agents."""

import pyspiel
import pytest
from gymnasium.utils.env_checker import check_env

import arena
import games
from core.records import read_jsonl

# The games' numeric observations are unbounded counters (totals, rounds) by design: the
# checker's advice to bound a Box says nothing about them.
pytestmark = pytest.mark.filterwarnings("ignore:.*Box observation space m:UserWarning")


def first_legal(info: dict, message: str = "Let us share fairly."):
    """A fixed policy: a message at a free-text turn, else the first legal action (0 when the
    seat has none: its game ended before its first decision)."""
    if info["free_text"]:
        return message
    return info["legal_actions"][0] if info["legal_actions"] else 0


def play(env, seed: int, policy=first_legal) -> tuple[list[str], list[float], bool, bool]:
    """One episode: its observation texts, rewards, and how it ended."""
    obs, info = env.reset(seed=seed)
    texts, rewards = [obs["text"]], []
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(info))
        texts.append(obs["text"])
        rewards.append(reward)
        if terminated or truncated:
            return texts, rewards, terminated, truncated


@pytest.mark.parametrize("name", games.names())
def test_check_env_passes_on_every_catalogue_game(name):
    check_env(arena.single_agent(name), skip_render_check=True)


def test_the_same_seed_replays_the_episode_and_other_seeds_differ():
    env = arena.single_agent("liars_dice", seat=1, opponents="random")
    first = play(env, seed=7)
    assert play(env, seed=7) == first
    assert any(play(env, seed=s) != first for s in range(1, 6))
    env.reset(seed=7)  # a mid-episode reset starts the match afresh
    env.step(env.reset(seed=3)[1]["legal_actions"][0])
    assert play(env, seed=7) == first


def test_no_history_carries_across_resets():
    env = arena.single_agent("prisoners_dilemma")
    env.reset(seed=0)
    for _ in range(3):
        env.step(0)
    obs, _ = env.reset(seed=1)
    fresh, _ = arena.single_agent("prisoners_dilemma").reset(seed=1)
    assert obs["text"] == fresh["text"]
    assert "HISTORY" not in obs["text"]


def test_tic_tac_toe_against_random_returns_match_openspiel():
    env = arena.single_agent("tic_tac_toe", seat=1, opponents="random")
    for seed in range(5):
        _, rewards, terminated, _ = play(env, seed)
        assert terminated
        state = pyspiel.load_game("tic_tac_toe").new_initial_state()
        for turn in env.last_record.turns:
            state.apply_action(turn.action)
        assert state.is_terminal()
        assert sum(rewards) == state.returns()[1]
        assert env.last_record.seats == {"player_0": "random", "player_1": "gym"}


def test_kuhn_against_cfr_returns_match_openspiel():
    env = arena.single_agent("kuhn_poker", seat=0, opponents="cfr")
    for seed in range(6):
        _, rewards, terminated, _ = play(env, seed)
        assert terminated
        history = env.match.env.state.history()  # chance deals included
        state = pyspiel.load_game("kuhn_poker").new_initial_state()
        for action in history:
            state.apply_action(action)
        assert sum(rewards) == state.returns()[0]
        assert env.last_record.returns["player_0"] == sum(rewards)


def test_a_reply_is_parsed_and_a_bad_one_is_retried_without_a_step():
    env = arena.single_agent("tic_tac_toe", opponents="random")
    obs, _ = env.reset(seed=0)
    again, reward, terminated, truncated, info = env.step("I am not sure")
    assert (again["text"], reward, terminated, truncated) == (obs["text"], 0.0, False, False)
    assert info["parse_error"]
    obs, _, _, _, info = env.step("I take the centre: [4]")
    assert "parse_error" not in info
    assert obs["action_mask"][4] == 0  # the centre is taken
    turn = env.match.record.turns[0]
    assert (turn.player, turn.action, turn.retries, len(turn.attempts)) == ("player_0", 4, 1, 2)
    assert turn.attempts[0].error and turn.attempts[1].error is None


def test_a_bad_reply_forfeits_when_asked():
    env = arena.single_agent("tic_tac_toe", on_bad_reply="forfeit")
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step("no idea")
    assert (reward, terminated, truncated) == (-1.0, True, False)
    assert info["parse_error"]


def test_an_action_outside_the_mask_is_an_illegal_move():
    env = arena.single_agent("tic_tac_toe", seat=1)
    obs, _ = env.reset(seed=0)
    taken = int(list(obs["action_mask"]).index(0))
    _, reward, terminated, _, _ = env.step(taken)
    assert (reward, terminated) == (-1.0, True)


def test_a_message_game_takes_a_string_step():
    env = arena.single_agent("trust_and_split", seat=0, opponents="random")
    _, info = env.reset(seed=0)
    assert info["free_text"]
    obs, reward, terminated, _, info = env.step("Hello there, let us split fairly.")
    assert not terminated and not info["free_text"]
    assert 'you said: "Hello there, let us split fairly."' in obs["text"]
    assert obs["action_mask"].sum() == len(info["legal_actions"]) > 0


def test_werewolf_with_bots_in_the_other_seats(tmp_path):
    out = tmp_path / "matches.jsonl"
    env = arena.single_agent("werewolf", seat=2, opponents="werewolf_heuristic", record=str(out))
    totals = []
    for seed in range(3):
        _, rewards, terminated, _ = play(env, seed)
        assert terminated
        totals.append(sum(rewards))
    records = list(read_jsonl(out))
    assert [r.returns["player_2"] for r in records] == totals
    assert [r.seed for r in records] == [0, 1, 2]
    seats = records[0].seats
    assert seats.pop("player_2") == "gym"
    assert set(seats.values()) == {"werewolf_heuristic"}
    assert all(r.roles and r.outcome["player_2"] in ("win", "loss", "draw") for r in records)


def test_max_turns_truncates():
    env = arena.single_agent("prisoners_dilemma", max_turns=4)
    _, rewards, terminated, truncated = play(env, seed=0)
    assert (terminated, truncated, len(rewards)) == (False, True, 2)


def test_bad_arguments_fail_in_one_line_before_a_match():
    with pytest.raises(ValueError, match="seat must be"):
        arena.single_agent("tic_tac_toe", seat=2)
    with pytest.raises(ValueError, match="on_bad_reply must be"):
        arena.single_agent("tic_tac_toe", on_bad_reply="ignore")
    with pytest.raises(ValueError, match="opponents must be one spec or 3"):
        arena.single_agent("public_goods", opponents=["random", "random"])
    with pytest.raises(ValueError, match="unknown agent"):
        arena.single_agent("tic_tac_toe", opponents="randomm")


def test_one_spec_per_other_seat_and_a_seat_by_name(tmp_path):
    out = tmp_path / "m.jsonl"
    specs = ["always_cooperate", "random", {"type": "always_defect"}]
    env = arena.single_agent("public_goods", seat="player_3", opponents=specs, record=str(out))
    play(env, seed=0)
    (record,) = read_jsonl(out)
    assert record.seats == {
        "player_0": "always_cooperate",
        "player_1": "random",
        "player_2": "always_defect",
        "player_3": "gym",
    }
    moves = {p: {t.move for t in record.turns if t.player == p} for p in record.seats}
    assert (moves["player_0"], moves["player_2"]) == ({"10"}, {"0"})  # the endowment, nothing


def test_ansi_render_is_the_seat_prompt():
    env = arena.single_agent("tic_tac_toe", render_mode="ansi")
    obs, _ = env.reset(seed=0)
    assert env.render() == obs["text"]


def test_both_seats_of_tic_tac_toe_in_turn(tmp_path):
    """Self-play through one env: the step acts for the seat to move; X's row wins."""
    out = tmp_path / "m.jsonl"
    env = arena.single_agent("tic_tac_toe", seat=[0, 1], opponents=[], record=str(out))
    _, info = env.reset(seed=0)
    seats, seat_rewards = [], []
    for cell in (0, 3, 1, 4, 2):  # X: 0, 1, 2 (the top row); O: 3, 4
        seats.append(info["seat"])
        _, reward, terminated, _, info = env.step(cell)
        seat_rewards.append(info["seat_rewards"])
        assert reward == 0.0  # the mean of a zero-sum game's two seats
    assert seats == ["player_0", "player_1"] * 2 + ["player_0"]
    assert terminated and seat_rewards[-1] == {"player_0": 1.0, "player_1": -1.0}
    (record,) = read_jsonl(out)
    assert record.seats == {"player_0": "gym", "player_1": "gym#2"}
    assert [t.agent for t in record.turns] == ["gym", "gym#2"] * 2 + ["gym"]


def test_two_seats_of_four_with_the_mean_reward(tmp_path):
    """Two seats of public goods held by the caller, two by bots: each step's reward is the
    mean of the two seats' gains, and each seat's gains add up to its recorded return."""
    out = tmp_path / "m.jsonl"
    env = arena.single_agent(
        "public_goods",
        seat=["player_2", 0],
        opponents=["always_cooperate", "always_defect"],
        record=str(out),
    )
    _, info = env.reset(seed=3)
    totals = {"player_0": 0.0, "player_2": 0.0}
    terminated = False
    while not terminated:
        assert info["seat"] in totals
        _, reward, terminated, truncated, info = env.step(info["legal_actions"][-1])
        gains = info["seat_rewards"]
        assert reward == pytest.approx(sum(gains.values()) / 2) and not truncated
        totals = {a: totals[a] + gains[a] for a in totals}
    (record,) = read_jsonl(out)
    assert record.seats == {
        "player_0": "gym",
        "player_1": "always_cooperate",
        "player_2": "gym#2",
        "player_3": "always_defect",
    }
    assert totals == pytest.approx({a: record.returns[a] for a in totals})


def test_several_seats_are_checked():
    with pytest.raises(ValueError, match="seats must be distinct"):
        arena.single_agent("tic_tac_toe", seat=[0, "player_0"], opponents=[])
    with pytest.raises(ValueError, match="opponents must be one spec or 2"):
        arena.single_agent("public_goods", seat=[0, 1], opponents=["random"])
