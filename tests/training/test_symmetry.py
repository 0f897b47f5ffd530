"""Board symmetries: the eight maps of tic-tac-toe, prompts carried through them, and training on the images."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import games
from agents import make_agent
from arena.runner import plan_matches, play
from games.tic_tac_toe import SYMMETRIES, symmetric_move, symmetric_text
from training.advantages import TurnSample
from training.sequences import render_prompt
from training.symmetry import symmetric_sequences

LINES = [{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {0, 3, 6}, {1, 4, 7}, {2, 5, 8}, {0, 4, 8}, {2, 4, 6}]
QUARTER = SYMMETRIES[1]  # a quarter turn clockwise: the top-left corner goes to the top right


def test_the_eight_maps_are_the_symmetries_of_the_square():
    assert SYMMETRIES[0] == tuple(range(9)) and len(set(SYMMETRIES)) == 8
    assert all(sorted(to) == list(range(9)) for to in SYMMETRIES)
    assert all(
        sorted(map(sorted, ({to[c] for c in line} for line in LINES))) == sorted(map(sorted, LINES))
        for to in SYMMETRIES
    )
    composed = {
        tuple(f[g[c]] for c in range(9)) for f, g in itertools.product(SYMMETRIES, SYMMETRIES)
    }
    assert composed == set(SYMMETRIES)  # a group: closed under composition
    assert QUARTER == (2, 5, 8, 1, 4, 7, 0, 3, 6)


def test_a_quarter_turn_of_each_rendering_by_hand():
    # X on 0 and 1, O on 4: a quarter turn puts X on 2 and 5, O stays in the centre.
    assert (
        symmetric_text("Board: Y Y . . T . . . .\nX to move (you).", QUARTER)
        == "Board: . . Y . T Y . . .\nX to move (you)."
    )
    assert symmetric_text("Board: |Y|Y|2|3|T|5|6|7|8|", QUARTER) == "Board: |0|1|Y|3|T|Y|6|7|8|"
    grid = " X | X | 2\n---+---+---\n 3 | O | 5\n---+---+---\n 6 | 7 | 8"
    assert (
        symmetric_text(grid, QUARTER)
        == " 0 | 1 | X\n---+---+---\n 3 | O | X\n---+---+---\n 6 | 7 | 8"
    )
    assert (
        symmetric_text("you (X): 0\nopponent (O): 4\nLEGAL MOVES: [2] [3] [8]", QUARTER)
        == "you (X): 2\nopponent (O): 4\nLEGAL MOVES: [8] [1] [6]"
    )
    assert symmetric_move("3", QUARTER) == "1" and symmetric_move("4", QUARTER) == "4"


def _position(board: str, moves: list[int]):
    env = games.make("tic_tac_toe", board=board)
    env.reset(seed=0)
    for a in moves:
        env.step(a)
    return env.unwrapped


@pytest.mark.parametrize("board", ["grid", "line", "relative", "numbered"])
def test_the_image_of_a_prompt_is_the_prompt_of_the_image_position(board):
    """Every position reached by random play, both readers, every map: text then map == map then text."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(30):
        moves = list(rng.permutation(9)[: rng.integers(0, 8)])
        env = _position(board, moves)
        if env.state.is_terminal():
            continue
        for to in SYMMETRIES:
            image = _position(board, [to[a] for a in moves])
            for reader in env.agents:
                legal = " ".join(f"[{a}]" for a in sorted(env.state.legal_actions()))
                mapped = " ".join(f"[{to[a]}]" for a in sorted(env.state.legal_actions()))
                text = "\n".join(
                    [*env.history_text(reader), env.state_text(reader), "LEGAL MOVES: " + legal]
                )
                want = "\n".join(
                    [
                        *image.history_text(reader),
                        image.state_text(reader),
                        "LEGAL MOVES: " + mapped,
                    ]
                )
                assert symmetric_text(text, to) == want
                checked += 1
    assert checked > 300


def test_games_without_symmetries_have_no_symmetry_module():
    assert games.symmetry_module("tic_tac_toe").SYMMETRIES is SYMMETRIES
    assert (
        games.symmetry_module("kuhn_poker") is None
        and games.symmetry_module("openspiel:tic_tac_toe") is None
    )


@pytest.fixture(scope="module")
def played():
    """Real matches of the tiny model (constrained, state prompt, relative board) and its tokenizer."""
    agent = make_agent(
        "llm:tiny-llama,prompt=state,system_prompt=Tic-tac-toe.,constrained=true,temperature=1.0,max_new_tokens=4,max_retries=0",
        "p",
    )
    records = list(
        play(
            plan_matches("tic_tac_toe", ["p", "r"], 4, params={"board": "relative"}),
            {"p": agent, "r": make_agent("random", "r")},
        )
    )
    samples = [
        TurnSample(m, k, 0.25 * k - 0.5, "tic_tac_toe", t.player, t)
        for m, r in enumerate(records)
        for k, t in enumerate(r.turns)
        if t.agent == "p"
    ]
    return samples, agent.backend.tokenizer


def test_each_image_is_the_turn_played_from_the_mapped_position(played):
    samples, tok = played
    seqs = symmetric_sequences(samples, {"tic_tac_toe": 7}, tok, np.random.default_rng(0))
    assert len(seqs) == 7 * len(samples)
    for i, s in enumerate(samples):
        images = seqs[7 * i : 7 * i + 7]
        for q in images:
            assert (
                q.advantage == s.advantage and q.logprobs is None
            )  # the current policy's, filled by Learner.prepare
            board = next(m["content"] for m in s.turn.messages if m["role"] == "user")
            assert any(
                q.prompt_ids
                == render_prompt(
                    tok,
                    [s.turn.messages[0], {"role": "user", "content": symmetric_text(board, to)}],
                )
                and q.allowed == [str(to[int(m)]) for m in s.turn.legal_moves]
                and q.completion_ids[0]
                == tok.encode(str(to[int(s.turn.completion)]), add_special_tokens=False)[0]
                for to in SYMMETRIES[1:]
            )
            assert (
                q.completion_ids[1:]
                == s.turn.token_ids[1:]
                == [tok.convert_tokens_to_ids("<|im_end|>")]
            )
    assert (
        render_prompt(tok, samples[0].turn.messages) == samples[0].turn.prompt_token_ids
    )  # re-rendering is what the backend saw


def test_k_images_are_distinct_maps_and_none_without_symmetries(played):
    samples, tok = played
    assert symmetric_sequences(samples, {}, tok, np.random.default_rng(0)) == []
    assert symmetric_sequences(samples, {"kuhn_poker": 2}, tok, np.random.default_rng(0)) == []
    seqs = symmetric_sequences(samples, {"tic_tac_toe": 3}, tok, np.random.default_rng(1))
    assert len(seqs) == 3 * len(samples)
    boards = [s.turn.messages[-1]["content"] for s in samples]
    late = [
        i for i, b in enumerate(boards) if len({symmetric_text(b, to) for to in SYMMETRIES}) == 8
    ]  # positions with no symmetry
    assert late and all(
        len({json.dumps(q.allowed) + str(q.prompt_ids) for q in seqs[3 * i : 3 * i + 3]}) == 3
        for i in late
    )


def test_positive_keeps_the_images_of_the_turns_with_a_positive_advantage_only(played):
    samples, tok = played
    assert {s.advantage > 0 for s in samples} == {True, False}
    seqs = symmetric_sequences(
        samples,
        {"tic_tac_toe": 2},
        tok,
        np.random.default_rng(0),
        positive=frozenset({"tic_tac_toe"}),
    )
    assert len(seqs) == 2 * sum(s.advantage > 0 for s in samples) and all(
        q.advantage > 0 for q in seqs
    )


def test_training_with_symmetries_learns_from_the_images_on_policy(tmp_path, tiny_run):
    """Twice the sequences with one image per turn; the images are scored by the policy that updates, ratio 1, nothing clipped."""
    from tests.tiny_run import quiet
    from training.selfplay import train

    rows = {}
    for k in (0, 1):
        cfg = tiny_run(
            f"k{k}",
            steps=2,
            minibatches=2,
            eval={"every": 0},
            agent={"prompt": "state"},
            games=[{"name": "tic_tac_toe", "params": {"board": "relative"}, "symmetries": k}],
        )
        train(cfg, console=quiet())
        rows[k] = [
            json.loads(line)
            for line in (tmp_path / f"k{k}" / "metrics.jsonl").read_text().splitlines()
        ]
    turns = [r["samples"] for r in rows[0]]
    assert [r["samples"] for r in rows[1]][0] == 2 * turns[
        0
    ]  # same step 1 matches (same seed), each turn and one image
    for r in rows[1]:
        assert (
            abs(r["first_ratio_min"] - 1) < 1e-5
            and abs(r["first_ratio_max"] - 1) < 1e-5
            and r["first_clip_frac"] == 0.0
        )


@pytest.mark.parametrize(
    "over, message",
    [
        (
            {"games": [{"name": "kuhn_poker", "symmetries": 1}]},
            "games[0].symmetries: kuhn_poker declares no board symmetries",
        ),
        (
            {"games": [{"name": "tic_tac_toe", "symmetries": 8}]},
            "games[0].symmetries must be an integer in [0, 7]",
        ),
        (
            {"games": [{"name": "tic_tac_toe", "symmetries": 1}], "agent": {"constrained": False}},
            "games[0].symmetries needs agent.constrained: true and agent.mode: fresh",
        ),
        (
            {"games": [{"name": "tic_tac_toe", "symmetries": 1}], "agent": {"mode": "multi_turn"}},
            "games[0].symmetries needs agent.constrained: true",
        ),
        (
            {
                "games": [
                    {"name": "tic_tac_toe", "symmetries": 1},
                    {"name": "tic_tac_toe", "params": {"board": "line"}},
                ]
            },
            "games[0].symmetries: every entry of tic_tac_toe must set the same symmetries",
        ),
        (
            {
                "games": [
                    {"name": "tic_tac_toe", "restart_buffer": 9},
                    {"name": "tic_tac_toe", "params": {"board": "line"}},
                ]
            },
            "games[0].restart_buffer: every entry of tic_tac_toe must set the same restart_buffer",
        ),
        (
            {"games": [{"name": "tic_tac_toe", "symmetry_advantages": "negative"}]},
            "games[0].symmetry_advantages must be one of all, positive, got 'negative'",
        ),
    ],
)
def test_bad_symmetry_settings_are_one_line_errors(over, message):
    from tests.tiny_run import merged
    from training.config import parse_config

    with pytest.raises(ValueError) as e:
        parse_config(merged(over))
    assert message in str(e.value) and "\n" not in str(e.value)
