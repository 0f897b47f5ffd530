"""The evaluation points of a run (`training.periodic_eval`): the evaluation module on training and held-out games, the perfect-play walk, the best policy picked on the selection matches."""

import dataclasses
import json

import numpy as np
import pytest

from tests.tiny_run import quiet, tiny
from training import periodic_eval, selfplay
from training.sections import PolicyModel
from training.selfplay import POLICY, train


def one_step_with_evaluations(tmp_path, evaluation: dict):
    """A one-step fp32 run evaluated before and after its step: its config and eval.jsonl rows."""
    cfg = tiny(
        tmp_path,
        steps=1,
        learner={"lr": 3e-3, "precision": "float32"},
        league={"snapshot_every": 0},
        eval={"every": 1, **evaluation},
    )
    train(cfg, console=quiet())
    rows = [json.loads(line) for line in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    return cfg, rows


def test_periodic_evaluation_is_the_evaluation_module_on_train_and_held_out_games(tmp_path):
    """Every evaluation point reports the training and the held-out games, with the very numbers
    `evaluation.run.evaluate` gives on the same matches; the selection score is its own matches'."""
    from agents.llm_agent import LLMAgent
    from agents.models import load_model as load_policy
    from evaluation.metrics import summary
    from evaluation.run import evaluate
    from training.config import eval_games
    from training.learner import Learner

    held_out = [{"name": "connect_four", "opponents": ["random"]}]
    cfg, rows = one_step_with_evaluations(
        tmp_path, {"games": 8, "select_games": 6, "held_out": held_out}
    )
    assert [(r["step"], r["split"], r["game"]) for r in rows] == [
        (s, split, g)
        for s in (0, 1)
        for split, g in (("train", "tic_tac_toe"), ("held_out", "connect_four"))
    ]
    # the step-0 policy (the untrained model), evaluated by the evaluation module directly
    model, tokenizer = load_policy(cfg.model, dtype="float32")
    backend = selfplay.make_backend(
        PolicyModel.of(cfg), Learner(model, tokenizer, cfg.learner), tokenizer
    )

    def direct(games_, matches, seed):
        agent = LLMAgent(
            POLICY, backend, dataclasses.replace(cfg.agent, temperature=0.0, seed=seed)
        )
        return summary(
            evaluate(
                agent,
                games_,
                matches,
                seed,
                name=POLICY,
                concurrency=cfg.concurrency,
                max_turns=cfg.max_turns,
            )
        )

    train_games, held = eval_games(cfg.eval, cfg.games)
    report = direct(train_games + held, 8, cfg.eval.seed)
    assert [{k: r[k] for k in report[0]} for r in rows[:2]] == report and report[1]["games"] == 8
    selection = direct(train_games, 6, cfg.eval.select_seed)
    assert (
        rows[0]["selection_score"] == float(np.mean([r["non_losing"] for r in selection]))
        and selection[0]["games"] == 6
    )


def test_perfect_play_rows_are_the_tree_walk_of_the_greedy_policy_at_each_evaluation_point(
    tmp_path,
):
    """With eval.perfect_play, each evaluation point has one row per seat whose figures are
    `evaluation.perfect_play` on the policy at the evaluation temperature, and the curve draws them."""
    from agents.llm_agent import LLMAgent
    from agents.models import load_model as load_policy
    from evaluation.exact_vs_random import PolicyTable
    from evaluation.perfect_play import perfect_play
    from training.learner import Learner

    cfg, rows = one_step_with_evaluations(
        tmp_path, {"games": 4, "select_games": 2, "perfect_play": True}
    )
    walks = [r for r in rows if r.get("kind") == "perfect_play"]
    assert [(r["step"], r["seat"]) for r in walks] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    model, tokenizer = load_policy(cfg.model, dtype="float32")  # the untrained step-0 policy
    backend = selfplay.make_backend(
        PolicyModel.of(cfg), Learner(model, tokenizer, cfg.learner), tokenizer
    )
    agent = LLMAgent(
        POLICY, backend, dataclasses.replace(cfg.agent, temperature=0.0, seed=cfg.eval.seed)
    )
    table = PolicyTable(agent, "tic_tac_toe", cfg.games[0].params)
    for seat in (0, 1):
        direct = perfect_play(table, seat)
        got = walks[seat]
        assert (got["positions"], got["blunders"], got["adversary_loss"]) == (
            direct.positions,
            direct.blunders,
            direct.adversary_loss,
        )
        # a greedy policy reaches one move per own position: blunder mass counts whole positions
        assert got["blunder_mass"] == pytest.approx(got["blunders"])
    assert walks[0]["positions"] > 0 and walks[1]["positions"] > walks[0]["positions"]
    assert (tmp_path / "run" / "eval.png").stat().st_size > 0


def test_best_is_chosen_on_the_selection_matches_not_the_reported_ones(tmp_path, monkeypatch):
    # Real evaluation matches; the scores are then scripted so the two sets disagree: the report
    # set favours step 0, the selection set step 2. Calls alternate report, selection per point.
    report, selection = [0.9, 0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.8, 0.3, 0.4]
    calls = []
    real_summary = periodic_eval.summary

    def scripted(cells_):
        rows = real_summary(cells_)
        point, is_selection = divmod(len(calls), 2)
        calls.append(is_selection)
        return [{**r, "non_losing": (selection if is_selection else report)[point]} for r in rows]

    monkeypatch.setattr(periodic_eval, "summary", scripted)
    cfg = tiny(
        tmp_path,
        steps=4,
        threads=1,
        checkpoint_every=4,
        league={"snapshot_every": 0},
        eval={"every": 1, "games": 8, "select_games": 8},
    )
    out = train(cfg, console=quiet())
    assert calls == [0, 1] * 5  # steps 0-4, each a report and a selection set
    rows = [json.loads(line) for line in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert [r["selection_score"] for r in rows] == selection and [
        r["non_losing"] for r in rows
    ] == report
    best = json.loads((tmp_path / "run" / "best" / "meta.json").read_text())
    assert best["step"] == 2 and best["selection_score"] == out["best"] == 0.8
    assert best["eval"] == [
        {k: v for k, v in rows[2].items() if k in best["eval"][0]}
    ]  # what is reported for it: 0.2
    assert best["eval"][0]["non_losing"] == 0.2


def test_the_selection_score_of_a_ranked_game_is_the_share_of_seats_finished_above():
    """Two-player games keep their non-losing rate; in a 4-seat game a mean rank of 1 is 1, of
    4 is 0, and the middle rank 2.5 (all alike) is one half."""
    two = {"non_losing": 0.75, "rank": None}
    assert periodic_eval.selection_score(two, 2) == 0.75
    ranked = lambda rank: {"non_losing": None, "rank": rank}  # noqa: E731
    assert [periodic_eval.selection_score(ranked(r), 4) for r in (1.0, 4.0, 2.5)] == [1.0, 0.0, 0.5]
