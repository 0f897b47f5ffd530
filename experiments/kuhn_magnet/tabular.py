"""Tabular prototype: a Kuhn poker policy of 12 logits trained by sampled self-play with the loop's
maths (per-information-state baseline, the policy-gradient term, `loss.magnet_coef` KL to a magnet
refreshed every `magnet_every` steps, entropy bonus, AdamW), exact exploitability from OpenSpiel.

    python experiments/kuhn_magnet/tabular.py --steps 400 --matches 128 --lr 0.05 --magnet-coef 1 --magnet-every 10

Prints the exploitability every `--every` steps; seconds per run. It chooses the method's constants
before any network trains (docs/results/kuhn.md).
"""

from __future__ import annotations

import argparse

import numpy as np
import pyspiel
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import exploitability

CONTEXTS = ("", "p", "b", "pb")  # betting before the decision: player 0, 1, 1, 0


def exact_exploitability(p_bet: np.ndarray, game, table) -> float:
    """p_bet[(context, card)] -> probability of Bet; OpenSpiel's exploitability of that policy."""
    for i, s in enumerate(table.states):
        key = s.information_state_string()
        ctx, card = key[1:], int(key[0])
        b = p_bet[CONTEXTS.index(ctx), card]
        table.action_probability_array[i] = [1 - b, b]
    return float(exploitability.exploitability(game, table))


def play(p_bet: np.ndarray, n: int, rng: np.random.Generator):
    """n sampled matches: (context, card, action, return of the mover) of every decision."""
    deal = np.array([rng.permutation(3)[:2] for _ in range(n)])
    c0, c1 = deal[:, 0], deal[:, 1]
    win0 = np.where(c0 > c1, 1.0, -1.0)
    u = rng.random((n, 3))
    a1 = u[:, 0] < p_bet[0, c0]
    a2 = np.where(a1, u[:, 1] < p_bet[2, c1], u[:, 1] < p_bet[1, c1])
    a3 = u[:, 2] < p_bet[3, c0]
    third = ~a1 & a2
    r0 = np.where(
        a1,
        np.where(a2, 2 * win0, 1.0),
        np.where(~a2, win0, np.where(a3, 2 * win0, -1.0)),
    )
    ctx = [np.zeros(n, int), np.where(a1, 2, 1), np.full(n, 3)]
    card = [c0, c1, c0]
    act = [a1, a2, a3]
    ret = [r0, -r0, r0]
    keep = [np.ones(n, bool), np.ones(n, bool), third]
    out = [np.concatenate([x[k][keep[k]] for k in range(3)]) for x in (ctx, card, act, ret)]
    return out


def run(args, seed: int) -> list[tuple[int, float]]:
    game = pyspiel.load_game("kuhn_poker")
    table = os_policy.TabularPolicy(game)
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, 0.1, (4, 3))  # logit of Bet per (context, card)
    magnet = theta.copy()
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    b1, b2 = args.beta1, 0.999
    curve = []
    for step in range(1, args.steps + 1):
        p = 1 / (1 + np.exp(-theta))
        ctx, card, act, ret = play(p, args.matches, rng)
        n = len(ctx)
        grad = np.zeros_like(theta)  # gradient of the loss (to descend)
        counts = np.zeros_like(theta)
        np.add.at(counts, (ctx, card), 1)
        base = np.zeros_like(theta)
        np.add.at(base, (ctx, card), ret)
        base = base / np.maximum(counts, 1)
        adv = ret - base[ctx, card]
        if args.group_std:  # gigpo's group_std: each information state's advantages over their std
            sq = np.zeros_like(theta)
            np.add.at(sq, (ctx, card), adv**2)
            std = np.sqrt(sq / np.maximum(counts - 1, 1))
            adv = adv / (std[ctx, card] + 1e-6)
        ps = p[ctx, card]
        np.add.at(grad, (ctx, card), -adv * (act - ps) / n)
        share = counts / n
        pq = p * (1 - p)
        coef = args.magnet_coef
        if args.magnet_decay:
            coef = coef + (args.magnet_final - coef) * min(1.0, step / args.magnet_decay)
        grad += share * pq * coef * (theta - magnet)  # d KL(pi || magnet) / d logit
        grad += share * pq * args.entropy_coef * theta  # d (-H) / d logit
        lr = args.lr
        if args.cosine:  # the learner's cosine schedule to min_lr_ratio 0.05
            lr = args.lr * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * step / args.steps)))
        if args.sgd:
            theta -= lr * grad
        else:
            m = b1 * m + (1 - b1) * grad
            v = b2 * v + (1 - b2) * grad**2
            theta -= lr * (m / (1 - b1**step)) / (np.sqrt(v / (1 - b2**step)) + args.eps)
        if args.magnet_every and step % args.magnet_every == 0:
            magnet = theta.copy()
        if step % args.every == 0:
            curve.append((step, exact_exploitability(1 / (1 + np.exp(-theta)), game, table)))
    return curve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--matches", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--magnet-coef", type=float, default=0.0)
    ap.add_argument("--magnet-every", type=int, default=0)
    ap.add_argument("--magnet-decay", type=int, default=0)
    ap.add_argument("--magnet-final", type=float, default=0.0)
    ap.add_argument("--entropy-coef", type=float, default=0.0)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--beta1", type=float, default=0.9, help="Adam beta1")
    ap.add_argument("--eps", type=float, default=1e-8, help="Adam epsilon")
    ap.add_argument("--group-std", action="store_true", help="advantages over their state's std")
    ap.add_argument("--cosine", action="store_true", help="cosine lr decay to 0.05 lr")
    ap.add_argument("--sgd", action="store_true", help="plain gradient steps instead of Adam")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args()
    for seed in args.seeds:
        curve = run(args, seed)
        print(f"seed {seed}: " + " ".join(f"{s}:{e:.3f}" for s, e in curve))


if __name__ == "__main__":
    main()
