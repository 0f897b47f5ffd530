import math

import pyspiel
import pytest

from experiments.supervised_bound import supervised_bound as sb


def _state(moves):
    s = pyspiel.load_game("tic_tac_toe").new_initial_state()
    for a in moves:
        s.apply_action(a)
    return s


def test_optimal_moves_take_a_win_block_a_threat_and_keep_every_drawing_move():
    assert sb.optimal_moves(_state([0, 3, 1, 4])) == [2]  # X has 0,1: completing the row wins
    assert sb.optimal_moves(_state([0, 4, 1])) == [2]  # O must block X's row 0,1
    assert sorted(sb.optimal_moves(_state([]))) == list(
        range(9)
    )  # every opening move draws with best play
    assert sorted(sb.optimal_moves(_state([4]))) == [
        0,
        2,
        6,
        8,
    ]  # against the centre only a corner holds the draw


def test_positions_are_every_non_terminal_board_once():
    states = sb.positions(pyspiel.load_game("tic_tac_toe"))
    assert len(states) == len({str(s) for s in states}) == 4520
    assert not any(s.is_terminal() for s in states)


def test_label_floor_is_the_loss_of_a_policy_uniform_over_the_optimal_moves():
    assert sb.label_floor([_state([])]) == pytest.approx(math.log(9) / 9)
    assert sb.label_floor([_state([0, 4, 1])]) == 0.0  # one optimal move: a perfect fit has no loss
    assert sb.label_floor([_state([]), _state([4])]) == pytest.approx(
        (math.log(9) + math.log(4)) / 13
    )


def test_a_few_fit_steps_lower_the_loss_on_their_pairs():
    import numpy as np
    import torch

    from agents.llm_agent import LLMAgent, LLMAgentConfig
    from agents.models import load_model
    from agents.transformers_backend import TransformersBackend
    from training.learner import Learner
    from training.learner_config import LearnerConfig

    model, tok = load_model("tiny-llama", dtype="float32", device="cpu")
    learner = Learner(model, tok, LearnerConfig(precision="float32"))
    agent = LLMAgent(
        "p",
        TransformersBackend((learner.policy, tok), name="p"),
        LLMAgentConfig(
            prompt="state", system_prompt="Tic-tac-toe.", constrained=True, max_new_tokens=4
        ),
    )
    states = sb.positions(pyspiel.load_game("tic_tac_toe"))[:40]
    pairs = sb.target_pairs(agent, tok, {"board": "relative"}, states, np.random.default_rng(0))
    assert len(pairs) == sum(len(sb.optimal_moves(s)) for s in states)
    assert all(
        abs(sum(p.advantage for p in pairs if p.prompt_ids == q.prompt_ids) - 1) < 1e-9
        for q in pairs[:5]
    )
    with torch.no_grad():
        before = float(sb.batch_loss(learner, pairs))
    optimizer = torch.optim.Adam(learner.parameters(), lr=3e-3)
    for _ in range(10):
        sb.fit_step(learner, optimizer, pairs, 1.0)
    with torch.no_grad():
        after = float(sb.batch_loss(learner, pairs))
    assert after < before - 0.05


@pytest.mark.slow  # ~40 s: 8,863 prompts and three exact evaluations
def test_the_fit_runs_and_lowers_the_loss_on_the_tiny_model(tmp_path, capsys):
    cfg = tmp_path / "ttt.yaml"
    cfg.write_text(
        "model: tiny-llama\nseed: 0\nsteps: 1\nthreads: 1\ngames:\n  - name: tic_tac_toe\n    params: {board: relative}\n"
        "agent: {prompt: state, system_prompt: Tic-tac-toe., constrained: true, max_new_tokens: 4}\n"
        "learner: {lr: 3.0e-3}\n"
    )
    sb.main([str(cfg), "--steps", "6", "--batch", "64", "--every", "3"])
    out = capsys.readouterr().out
    assert "4520 positions" in out
    assert "a perfect fit's loss 0.251" in out
    assert (
        len([line for line in out.splitlines() if line.startswith("step ")]) == 3
    )  # steps 0, 3 and 6
    assert all(
        0.0 <= float(line.split(" O ")[1].split()[0]) <= 1.0
        for line in out.splitlines()
        if line.startswith("step ")
    )
