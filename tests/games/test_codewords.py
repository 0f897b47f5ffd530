"""Codewords: the rules on hand-worked boards, the clue rule and its parser, the PettingZoo
tests, what each seat may see, the shipped word list, the bots through the arena, and
`arena play` / `arena eval` / `arena tournament` on the game."""

from __future__ import annotations

import contextlib
import io
import json
import time
import tomllib
import warnings
from collections import Counter
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from pettingzoo.test import api_test, seed_test

import games
from agents import check_spec, make_agent
from agents.base import PendingTurn, WrongGame
from arena.runner import MatchPlan, play
from cli.main import main as arena_main
from games.codewords import (
    GRID,
    NO_CLUE,
    PASS,
    Codewords,
    clue_problem,
    read_clue,
    read_word_list,
    word_list,
)
from games.parsing import ParseError

ROOT = Path(__file__).resolve().parents[2]
WORDS = (
    "apple banana cherry grape lemon lion tiger elephant giraffe zebra hammer saw drill nail "
    "screw piano guitar drum violin trumpet car bus train truck bicycle"
).split()
KEY = ["red"] * 9 + ["blue"] * 8 + ["neutral"] * 7 + ["assassin"]
CELL = {w: k for k, w in enumerate(WORDS)}  # apple..giraffe red; zebra..guitar blue


def board(key=KEY, **params) -> Codewords:
    env = games.make("codewords", **params)
    env.reset(options={"words": WORDS, "key": list(key)})
    return env


def guess(env: Codewords, *words: str) -> None:
    for w in words:
        env.step(PASS if w == "pass" else CELL[w])


# --- rules, by hand ----------------------------------------------------------------------
def test_seats_roles_teams_and_the_first_turn():
    env = board()
    assert env.roles == {
        "player_0": "clue_giver",
        "player_1": "guesser",
        "player_2": "clue_giver",
        "player_3": "guesser",
    }
    assert env.teams == {
        "player_0": "red",
        "player_1": "red",
        "player_2": "blue",
        "player_3": "blue",
    }
    assert env.agent_selection == "player_0" and env.is_free_text("player_0")
    assert env.legal_actions("player_0") == [NO_CLUE] and env.legal_actions("player_1") == []


def test_a_drawn_board_has_nine_eight_seven_and_one_assassin_for_either_first_team():
    for first, nine, eight in (("red", "red", "blue"), ("blue", "blue", "red")):
        env = games.make("codewords", first=first)
        env.reset(seed=3)
        counts = Counter(env.key)
        assert counts == {nine: 9, eight: 8, "neutral": 7, "assassin": 1}
        assert len(set(env.words)) == GRID and set(env.words) <= set(word_list())
        assert env.agent_selection == Codewords.seat(first, "clue_giver")


def test_a_correct_guess_continues_and_a_neutral_one_ends_the_turn():
    env = board()
    env.step("fruit 2")
    assert env.agent_selection == "player_1" and env.legal_actions("player_1") == list(range(GRID))
    guess(env, "apple")
    assert env.agent_selection == "player_1" and env.words_left("red") == 8
    assert PASS in env.legal_actions("player_1")  # after a first guess
    guess(env, "drum")  # neutral
    assert env.agent_selection == "player_2" and env.phase == "clue"
    assert env.turns[0].guesses == [(CELL["apple"], "red"), (CELL["drum"], "neutral")]


def test_the_other_teams_word_counts_for_them_and_ends_the_turn():
    env = board()
    env.step("fruit 2")
    guess(env, "zebra")
    assert env.words_left("blue") == 7 and env.words_left("red") == 9
    assert env.agent_selection == "player_2"


def test_the_assassin_loses_for_the_guessing_team():
    env = board()
    env.step("fruit 2")
    guess(env, "bicycle")
    assert all(env.terminations.values()) and env.winner == "blue" and env.end == "assassin"
    assert env._cumulative_rewards == {
        "player_0": -1.0,
        "player_1": -1.0,
        "player_2": 1.0,
        "player_3": 1.0,
    }


def test_at_most_n_plus_one_guesses_then_the_turn_passes():
    env = board()
    env.step("fruit 1")
    guess(env, "apple", "banana")  # both red: 2 = N + 1 guesses, the turn ends
    assert env.agent_selection == "player_2" and env.words_left("red") == 7


def test_pass_only_after_a_first_guess():
    env = board()
    env.step("fruit 3")
    assert PASS not in env.legal_actions("player_1")
    guess(env, "apple", "pass")
    assert env.agent_selection == "player_2" and env.turns[0].passed
    env = board()
    env.step("fruit 3")
    env.step(PASS)  # before any guess: an illegal action ends the game
    assert all(env.terminations.values()) and env._cumulative_rewards["player_1"] == -1.0
    assert env._cumulative_rewards["player_0"] == 0.0


def test_revealing_all_its_words_wins_even_when_the_other_team_reveals_the_last():
    env = board()
    env.step("fruit 9")
    guess(env, *WORDS[:9])
    assert env.winner == "red" and env.end == "words"
    assert [env._cumulative_rewards[a] for a in env.possible_agents] == [1.0, 1.0, -1.0, -1.0]
    env = board()
    env.step("fruit 8")
    guess(env, *WORDS[:8], "drum")  # 8 red words, then a neutral one
    env.step("music 1")
    guess(env, "giraffe")  # blue reveals red's last word: red wins
    assert env.winner == "red" and env._cumulative_rewards["player_2"] == -1.0


def test_max_turns_without_a_winner_is_a_draw():
    env = board(max_turns=2)
    env.step("fruit 1")
    guess(env, "drum")
    env.step("music 1")
    guess(env, "apple")  # red's word: blue's turn ends, the second turn
    assert all(env.terminations.values()) and env.winner is None and env.end == "max_turns"
    assert set(env._cumulative_rewards.values()) == {0.0}


def test_a_void_clue_is_a_counted_violation_and_allows_one_guess_or_a_pass():
    env = board()
    env.step("apple 2")  # a grid word: void
    assert env.violations == {"red": 1, "blue": 0} and env.turn.clue is None
    assert env.agent_selection == "player_1" and PASS in env.legal_actions("player_1")
    guess(env, "banana")  # one guess only, even a right one
    assert env.agent_selection == "player_2"
    env.step(NO_CLUE)  # the discrete void clue: no violation
    assert env.violations == {"red": 1, "blue": 0} and PASS in env.legal_actions("player_3")
    guess(env, "pass")
    env.step("guess banana then cherry")  # a message to the guesser: void, and never shown
    assert env.violations == {"red": 2, "blue": 0}
    seen = {a: env.view(a).prompt() for a in env.possible_agents}
    for agent in ("player_1", "player_2", "player_3"):
        assert "apple 2" not in seen[agent]
        assert "then cherry" not in seen[agent] and "Turn 3 (red): no valid clue" in seen[agent]
    assert "(your clue was void: 'apple' is a word of the grid)" in seen["player_0"]
    assert "guess banana then cherry" in seen["player_0"]  # its own message, with the reason


def test_an_int_where_a_clue_is_due_or_a_string_where_a_guess_is_are_illegal():
    env = board()
    env.step(3)
    assert all(env.terminations.values()) and env._cumulative_rewards["player_0"] == -1.0
    env = board()
    env.step("fruit 2")
    env.step("apple")
    assert all(env.terminations.values()) and env._cumulative_rewards["player_1"] == -1.0


# --- the clue rule and its parser -------------------------------------------------------
@pytest.mark.parametrize(
    "word, number, problem",
    [
        ("fruit", 2, None),
        ("FRUIT", 9, None),
        ("apple", 1, "is a word of the grid"),
        ("Apple", 1, "is a word of the grid"),
        ("app", 1, "part of the grid word 'apple'"),
        ("tig", 1, "part of the grid word 'tiger'"),
        ("apples", 1, "contains the grid word 'apple'"),
        ("pineapple", 1, "contains the grid word 'apple'"),
        ("fruit", 0, "number must be 1 to 9"),
        ("fruit", 10, "number must be 1 to 9"),
        ("fru1t", 1, "letters a-z only"),
        ("früit", 1, "letters a-z only"),
        ("a" * 25, 1, "at most 24"),
    ],
)
def test_the_clue_rule(word, number, problem):
    found = clue_problem(word, number, WORDS)
    assert (found is None) if problem is None else (problem in found)


@pytest.mark.parametrize(
    "reply, clue",
    [
        ("fruit 2", ("fruit", 2)),
        ("  Fruit 2. ", ("fruit", 2)),
        ("fruit: 2", ("fruit", 2)),
        ("fruit, 2", ("fruit", 2)),
        ("[fruit 2]", ("fruit", 2)),
        ("\\boxed{fruit 2}", ("fruit", 2)),
        ("<answer>fruit 2</answer>", ("fruit", 2)),
        ("<think>apple 3? no, a grid word</think>fruit 2", ("fruit", 2)),
        ("My clue: [music 3] or maybe [fruit 2]", ("fruit", 2)),  # the last bracket decides
        ("ｆｒｕｉｔ 2", ("fruit", 2)),  # full-width letters (NFKC)
    ],
)
def test_clue_replies_that_parse(reply, clue):
    assert read_clue(reply, WORDS) == clue


@pytest.mark.parametrize(
    "reply, kind",
    [
        ("", "empty"),
        ("<think>hmm</think>", "empty"),
        ("fruit", "no_move"),
        ("fruit two", "no_move"),
        ("2 fruit", "no_move"),
        ("fruit 2 music 3", "no_move"),
        ("I would say fruit 2", "no_move"),
        ("pick apple and banana", "no_move"),
        ("ice-cream 2", "no_move"),
        ("fruit -2", "no_move"),
        ("fruit 2.5", "no_move"),
        ("apple 2", "illegal"),
        ("[apples 2]", "illegal"),
        ("fruit 0", "illegal"),
        ("fruit 12", "illegal"),
        ("x" * 20_001, "too_long"),
    ],
)
def test_clue_replies_that_do_not(reply, kind):
    with pytest.raises(ParseError) as e:
        read_clue(reply, WORDS)
    assert e.value.kind == kind and "\n" not in e.value.message


def test_parse_gives_the_canonical_clue_then_parses_guesses_like_every_game():
    env = board()
    assert env.parse("player_0", "<answer>Fruit: 2</answer>") == "fruit 2"
    with pytest.raises(ParseError):
        env.parse("player_0", "apple 2")
    env.step(env.parse("player_0", "[fruit 2]"))
    assert env.turn.clue == ("fruit", 2)
    assert env.parse("player_1", "I go with [Banana].") == CELL["banana"]
    with pytest.raises(ParseError) as e:
        env.parse("player_1", "[pass]")  # not legal before a first guess
    assert e.value.kind == "illegal"
    with pytest.raises(ParseError) as e:
        env.parse("player_1", "apple or banana")
    assert e.value.kind == "ambiguous"


def test_free_text_is_bounded_and_a_huge_reply_is_refused_fast():
    env = board()
    view = env.view("player_0")
    assert view.free_text and view.legal_moves == [] and 0 < view.max_chars <= 48
    start = time.thread_time()
    for reply in ("fruit " * 3000, "[" * 19_000, "<think>" + "x" * 19_000):
        with pytest.raises(ParseError):
            env.parse("player_0", reply)
    assert time.thread_time() - start < 0.5
    clue = env.parse("player_0", "z" * 24 + " 9")
    assert len(clue) <= view.max_chars


# --- PettingZoo --------------------------------------------------------------------------
def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def test_api_and_seed_tests():
    _quiet(api_test, games.make("codewords"), num_cycles=300)
    _quiet(seed_test, lambda: games.make("codewords"), num_cycles=200)


def test_bad_params_are_one_line_errors():
    for params, message in (
        ({"first": "green"}, "first must be red or blue"),
        ({"max_turns": 0}, "max_turns must be a positive integer"),
        ({"word_pool": 10}, "word_pool must be 0 or 25"),
    ):
        with pytest.raises(ValueError, match=message):
            games.make("codewords", **params)
    env = games.make("codewords")
    with pytest.raises(ValueError, match="exactly one assassin"):
        env.reset(options={"words": WORDS, "key": ["red"] * 25})


def test_word_pool_draws_from_the_first_words_of_the_list():
    env = games.make("codewords", word_pool=30)
    for seed in range(5):
        env.reset(seed=seed)
        assert set(env.words) <= set(list(word_list())[:30])


# --- what each seat may see --------------------------------------------------------------
def random_play(seed: int, decisions: int) -> tuple[list, list]:
    """(actions, guess-turn indices) of `decisions` random decisions from `seed`: clues are
    tags with a small number, guesses uniform over the legal moves."""
    env = games.make("codewords")
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    tags = sorted({t for ts in word_list().values() for t in ts})
    actions = []
    while env.agents and len(actions) < decisions and not any(env.terminations.values()):
        agent = env.agent_selection
        if env.is_free_text(agent):
            action = f"{tags[rng.integers(len(tags))]} {rng.integers(1, 4)}"
        else:
            legal = env.legal_actions(agent)
            legal = (
                [a for a in legal if a != PASS] if rng.random() < 0.8 and len(legal) > 1 else legal
            )
            action = legal[rng.integers(len(legal))]
        env.step(action)
        actions.append(action)
    return actions, env


def replayed(words, key, actions) -> Codewords:
    env = games.make("codewords")
    env.reset(options={"words": words, "key": key})
    for a in actions:
        env.step(a)
    return env


@pytest.mark.parametrize("seed", range(12))
def test_guessers_see_nothing_of_the_key_and_clue_givers_see_it(seed):
    """Permuting the key among the unrevealed words leaves every guesser's prompt and
    observation unchanged, at every point of a game; a clue-giver's prompt changes."""
    rng = np.random.default_rng(100 + seed)
    full, _ = random_play(seed, 200)
    for cut in sorted({0, 1, 2, *rng.integers(0, len(full), 6)}):
        env = replayed(*_board_of(seed), full[:cut])
        hidden = [k for k in range(GRID) if not env.revealed[k]]
        key = list(env.key)
        for _ in range(20):  # a permutation that moves some kind
            perm = rng.permutation(hidden)
            other = list(key)
            for src, dst in zip(hidden, perm):
                other[dst] = key[src]
            if other != key:
                break
        twin = replayed(env.words, other, full[:cut])
        for agent in ("player_1", "player_3"):
            assert env.view(agent).prompt() == twin.view(agent).prompt(), (seed, cut, agent)
            a, b = env.observe(agent), twin.observe(agent)
            assert np.array_equal(a["observation"], b["observation"])
            assert np.array_equal(a["action_mask"], b["action_mask"])
        if other != key and env.agents and not any(env.terminations.values()):
            for agent in ("player_0", "player_2"):
                assert env.view(agent).prompt() != twin.view(agent).prompt()


def _board_of(seed: int) -> tuple[list, list]:
    env = games.make("codewords")
    env.reset(seed=seed)
    return list(env.words), list(env.key)


def test_the_clue_giver_prompt_names_every_kind_of_the_key():
    text = board().view("player_2").prompt()
    assert "Your team's words: zebra, hammer, saw" in text and "The assassin: bicycle" in text
    assert "The other team's words: apple, banana" in text
    guesser = board().view("player_3").prompt()
    assert "assassin: bicycle" not in guesser and "Your team's words" not in guesser


# --- the shipped word list ---------------------------------------------------------------
def test_the_word_list_ships_as_package_data_and_reads_through_importlib_resources():
    text = resources.files("games").joinpath("data/codewords.txt").read_text(encoding="utf-8")
    assert read_word_list(text) == word_list()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["games"]
    shipped = [p for pattern in patterns for p in (ROOT / "games").glob(pattern)]
    assert ROOT / "games" / "data" / "codewords.txt" in shipped


def test_the_word_list_has_hundreds_of_words_with_shared_tags_that_are_always_legal_clues():
    words = word_list()
    assert len(words) >= 300 and "pass" not in words
    uses = Counter(t for tags in words.values() for t in tags)
    assert all(2 <= len(tags) <= 4 and len(set(tags)) == len(tags) for tags in words.values())
    assert min(uses.values()) >= 3  # every tag is shared by several words
    for tag in uses:
        assert tag.isalpha() and tag.isascii()
        assert not [w for w in words if tag in w or w in tag], tag


def test_a_bad_word_list_line_is_a_one_line_error():
    with pytest.raises(ValueError, match="line 2 must be 'word: tag tag ...'"):
        read_word_list("apple: fruit red\nbanana\n")


# --- bots --------------------------------------------------------------------------------
def bot_records(seats: list[str], n: int, seed: int = 0):
    names = {k: f"{s}@{k}" for k, s in enumerate(seats)}  # one agent per seat
    agents = {names[k]: make_agent(s, names[k]) for k, s in enumerate(seats)}
    plans = [MatchPlan(f"m{i}", "codewords", list(names.values()), seed=seed + i) for i in range(n)]
    return list(play(plans, agents))


def test_tag_bots_beat_a_team_with_a_random_guesser():
    records = bot_records(
        ["codewords_tags", "codewords_tags", "codewords_tags", "codewords_random"], 40
    )
    red_wins = sum(r.returns["player_0"] == 1.0 for r in records)
    assert red_wins >= 32, red_wins
    records = bot_records(
        ["codewords_tags", "codewords_random", "codewords_tags", "codewords_tags"], 40
    )
    assert sum(r.returns["player_2"] == 1.0 for r in records) >= 32
    for r in records:
        assert r.error is None and sorted(r.returns.values()) in ([-1.0, -1.0, 1.0, 1.0], [0.0] * 4)


def test_bots_replay_exactly_from_the_match_seed():
    seats = ["codewords_random", "codewords_tags", "codewords_tags", "codewords_random"]
    a, b = bot_records(seats, 6, seed=7), bot_records(seats, 6, seed=7)
    assert [[t.action for t in r.turns] for r in a] == [[t.action for t in r.turns] for r in b]


def test_the_tag_clue_giver_gives_its_best_safe_tag_and_the_tag_guesser_follows_it():
    env = board()
    turn = PendingTurn("m", env, "player_0", np.random.default_rng(0))
    (rec,) = make_agent("codewords_tags").act([turn])
    # red: apple banana cherry grape lemon carry "fruit" (5), no other word does
    assert rec.action == "fruit 5"
    env.step(rec.action)
    bot = make_agent("codewords_tags")
    picked = []
    while env.agent_selection == "player_1":
        (g,) = bot.act([PendingTurn("m", env, "player_1", np.random.default_rng(0))])
        picked.append(env.move_text("player_1", g.action))
        env.step(g.action)
    assert picked == ["apple", "banana", "cherry", "grape", "lemon", "pass"]


def test_the_tag_guesser_reads_no_key():
    env, twin = board(), board(key=KEY[9:17] + KEY[:9] + KEY[17:])  # red and blue swapped
    for e in (env, twin):
        e.step("music 2")
    bot = make_agent("codewords_tags")
    moves = [
        bot.act([PendingTurn("m", e, "player_1", np.random.default_rng(0))])[0].action
        for e in (env, twin)
    ]
    assert moves[0] == moves[1] == CELL["piano"]


def test_a_codewords_bot_refuses_another_game_before_any_match(tmp_path, capsys):
    with pytest.raises(WrongGame, match="plays codewords only"):
        check_spec("codewords_tags", [("tic_tac_toe", {})])
    check_spec("codewords_random", [("codewords", {"max_turns": 10})])
    code = arena_main(["play", "tic_tac_toe", "--agents", "codewords_tags", "random"])
    err = capsys.readouterr().err
    assert code != 0 and "plays codewords only" in err and err.count("\n") == 1


# --- the command line --------------------------------------------------------------------
def test_arena_play_codewords_with_bots(tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    argv = ["play", "codewords", "--agents", "codewords_tags", "codewords_random", "--matches", "4"]
    assert arena_main([*argv, "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 4 and all(r["game"] == "codewords" for r in lines)
    assert "codewords_tags" in capsys.readouterr().out


def test_arena_eval_codewords_reports_its_measures(tmp_path):
    out = tmp_path / "eval"
    argv = ["eval", "--agent", "codewords_tags", "--games", "codewords"]
    argv += ["--opponents", "codewords_random", "--matches", "4", "--out", str(out)]
    assert arena_main(argv) == 0
    rows = json.loads((out / "eval.json").read_text())
    mine = {r["side"]: r for r in rows if r["kind"] == "codewords"}
    assert set(mine) == {"all", "red", "blue", "clue_giver", "guesser"}
    # the agent plays both seats of one team, each team of a deal in turn: 4 team games, 8 seats
    assert (mine["all"]["games"], mine["all"]["seats"]) == (4, 8)
    assert mine["red"]["games"] == mine["blue"]["games"] == 2
    assert mine["clue_giver"]["violations_per_clue"] == 0.0
    assert mine["guesser"]["violations_per_clue"] is None


def test_arena_tournament_codewords_with_teams(tmp_path, capsys):
    db = tmp_path / "t.db"
    config = ROOT / "configs" / "tournament_codewords.yaml"
    assert arena_main(["tournament", str(config), "--db", str(db)]) == 0
    assert "Plackett-Luce" in capsys.readouterr().out
    from tournaments.run import load_tournament

    result = load_tournament(db)
    assert len(result.results) == 5 * 4  # C(5, 4) tables, 4 rotations
    for f in result.finishes():
        points = f.points()
        assert points[0] == points[1] and points[2] == points[3]  # teammates share the result
    tags = [result.ratings[p].elo for p in ("tags-a", "tags-b", "tags-c")]
    randoms = [result.ratings[p].elo for p in ("random-a", "random-b")]
    assert min(tags) > max(randoms)


def test_a_built_wheel_carries_the_word_list_and_reads_it_installed(tmp_path):
    """Build a wheel of the game packages from a copy of the sources, unpack it, and read the
    word list from there through importlib.resources."""
    import os
    import shutil
    import subprocess
    import sys
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in ("core", "games"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-q", "-w", str(wheels)], check=True, capture_output=True)
    (wheel,) = wheels.glob("*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = "import games.codewords as c; print(c.__file__); print(len(c.word_list()))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[0].startswith(str(site)) and int(out[1]) == len(word_list())
