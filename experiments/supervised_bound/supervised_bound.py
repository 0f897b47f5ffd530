"""How well can the policy's model and prompt fit perfect tic-tac-toe play? A supervised bound for RL.

    python -m experiments.supervised_bound.supervised_bound configs/train_tictactoe_tiny.yaml --steps 500
    python -m experiments.supervised_bound.supervised_bound CONFIG --set learner.lr=3e-4 --set model=tiny-llama:hidden=128:heads=8:layers=4

The config's model (freshly initialised for its seed) and its agent's prompt are trained by
cross-entropy on every tic-tac-toe position (4,520, either player to move) with the minimax-optimal
moves as targets (uniform over the moves of equal value): batches of `--batch` (position, move)
pairs drawn uniformly, Adam at the config's `learner.lr`, fp32. Every `--every` steps it prints the
loss (against `label_floor`, a perfect fit's) and the exact greedy rate against random
(`evaluation.exact_vs_random`: X, O, and O's share of threats blocked). Self-play RL with the same
model cannot be expected to beat what perfect labels teach in as many examples: if this fit is
slow, the plateau is the model's and the prompt's, not the advantage estimator's
(experiments/tictactoe_seeds/tuning.md, rounds 4 and 5).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace

import numpy as np
import torch

from agents.bots import MinimaxAgent

GAME = "tic_tac_toe"
_MINIMAX = MinimaxAgent()  # full search, its move values cached by position


def optimal_moves(state) -> list[int]:
    """The legal moves of best game-theoretic value for the player to move."""
    return _MINIMAX.best_actions(state)


def positions(game) -> list:
    """Every non-terminal position of `game`, once each (merged by board)."""
    seen: dict[str, object] = {}
    stack = [game.new_initial_state()]
    while stack:
        s = stack.pop()
        if s.is_terminal() or str(s) in seen:
            continue
        seen[str(s)] = s
        stack.extend(s.child(a) for a in s.legal_actions())
    return list(seen.values())


def label_floor(states: list) -> float:
    """The mean loss per (position, move) pair of a policy uniform over the optimal moves: a perfect fit's."""
    n = [len(optimal_moves(s)) for s in states]
    return sum(math.log(k) for k in n) / sum(n)


def target_pairs(agent, tokenizer, params: dict, states: list, rng: np.random.Generator) -> list:
    """(prompt, optimal move) `TrainingSequence`s, weight 1/|optimal moves| each: a position's target mass sums to 1."""
    from evaluation.exploitability import turn_at
    from training.sequences import TrainingSequence, render_prompt

    pairs = []
    for i, s in enumerate(states):
        turn = turn_at(agent, GAME, params, s, f"sb{i}", rng)
        view = turn.env.view(turn.player)
        prompt = render_prompt(tokenizer, agent.prompt_messages(turn))
        best = optimal_moves(s)
        text = dict(zip(view.actions, view.legal_moves))
        for a in best:
            reply = tokenizer(text[a], add_special_tokens=False)["input_ids"] + [
                tokenizer.eos_token_id
            ]
            pairs.append(
                TrainingSequence(prompt, reply, 1.0 / len(best), None, list(view.legal_moves))
            )
    return pairs


def batch_loss(learner, batch: list) -> torch.Tensor:
    """Weighted cross-entropy of `batch` under the learner's (constrained) policy, mean over the pairs;
    backpropagated micro-batch by micro-batch when grad is enabled (the returned value is detached)."""
    total = torch.zeros(())
    for logp, index in learner.completion_logprobs(batch):
        weights = torch.tensor(
            [batch[i].advantage for i in index], dtype=logp.dtype, device=logp.device
        )
        loss = -(logp * weights).sum() / len(batch)
        if loss.requires_grad:
            loss.backward()
        total += loss.detach()
    return total


def fit_step(learner, optimizer, batch: list, max_grad_norm: float) -> float:
    """One Adam step on `batch`; its loss before the step."""
    optimizer.zero_grad()
    loss = batch_loss(learner, batch)
    torch.nn.utils.clip_grad_norm_(learner.parameters(), max_grad_norm)
    optimizer.step()
    return float(loss)


def fresh_policy(cfg):
    """(model, tokenizer, learner, greedy agent) for a supervised fit: the config's model freshly
    initialised for its seed, fp32, at the config's threads; the agent plays through the learner's
    module, so what the optimizer updates is what is evaluated."""
    from agents.llm_agent import LLMAgent
    from agents.models import load_model
    from agents.transformers_backend import TransformersBackend
    from core.machine import set_threads
    from training.learner import Learner

    set_threads(cfg.threads, verbose=False)
    torch.manual_seed(cfg.seed)
    model, tok = load_model(cfg.model, dtype="float32", device="cpu")
    learner = Learner(model, tok, replace(cfg.learner, precision="float32"))
    agent = LLMAgent(
        "policy",
        TransformersBackend((learner.policy, tok), name="policy", max_batch_size=256),
        replace(cfg.agent, temperature=0.0),
    )
    return model, tok, learner, agent


def main(argv: list[str] | None = None) -> None:
    import pyspiel

    from core.overrides import parse_overrides
    from evaluation.exact_vs_random import PolicyTable, exact_vs_random, tactics
    from training.config import load_config

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "config",
        help="a tic-tac-toe training config (its model, seed, agent prompt, game params, learner.lr)",
    )
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--every", type=int, default=100, help="evaluate every N steps")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, dotted; repeatable",
    )
    args = ap.parse_args(argv)
    cfg = load_config(args.config, parse_overrides(args.set))
    games = [g for g in cfg.games if g.name == GAME]
    if not games:
        raise SystemExit(f"error: {args.config} trains no {GAME}")
    params = games[0].params
    model, tok, learner, agent = fresh_policy(cfg)
    states = positions(pyspiel.load_game(GAME))
    rng = np.random.default_rng(cfg.seed)
    pairs = target_pairs(agent, tok, params, states, rng)
    print(
        f"{len(states)} positions, {len(pairs)} (position, optimal move) pairs; a perfect fit's loss {label_floor(states):.3f}"
    )
    optimizer = torch.optim.Adam(learner.parameters(), lr=cfg.learner.lr)

    def report(step: int, loss: float, t0: float) -> None:
        model.eval()
        table = PolicyTable(agent, GAME, params)
        x, o = exact_vs_random(table)
        tac = tactics(table, seat=1)
        model.train()
        print(
            f"step {step:5d}  loss {loss:.3f}  X {x.win + x.draw:.3f}  O {o.win + o.draw:.3f}  "
            f"O wins taken {tac.wins_taken:.2f}  O blocks {tac.blocks_made:.2f}  {time.perf_counter() - t0:.0f}s",
            flush=True,
        )

    t0, losses = time.perf_counter(), []
    report(0, float("nan"), t0)
    for step in range(1, args.steps + 1):
        batch = [pairs[i] for i in rng.choice(len(pairs), size=args.batch, replace=False)]
        losses.append(fit_step(learner, optimizer, batch, cfg.learner.max_grad_norm))
        if step % args.every == 0 or step == args.steps:
            report(step, float(np.mean(losses[-args.every :])), t0)


if __name__ == "__main__":
    main()
