"""Board symmetries as extra training data: every learning turn also seen rotated or mirrored.

A tic-tac-toe position and its seven rotations and reflections have the same value, and
the right move maps with the board. A policy that has learnt to block a threat on the
left column has not learnt the same block on the right one: each orientation is learnt
from its own turns, and a block the policy never samples is never credited. With `games[i].symmetries: k`, each learning turn of
that game is trained on together with k of its images (drawn without repetition from
the seven), with the turn's advantage: the gradient of the symmetric policy
pi_sym(a | s) = mean over maps g of pi(g a | g s). AlphaGo Zero trained on the eight
images of each position the same way.

An image is the turn's chat messages with every user message carried through the map
(`symmetric_text` of the game's module: board, legal moves, history) and the move
carried through it (`symmetric_move`); its prompt tokens are rendered again with the
chat template, its completion tokens are the new move's tokens followed by whatever
the original reply had after its move (the end-of-turn token). Its behaviour logprobs
are left empty, so the learner takes the current policy's (`Learner.prepare`): the
image is scored as if the policy had played it, ratio 1 on the first update.

That makes an image an off-policy sample trained on as if on-policy. Where the policy
is not yet symmetric, an image of a bad move (negative advantage) that the policy gives
~0 probability in the new orientation pushes that orientation's mass onto the moves it
already prefers, and the policy's entropy collapses. `games[i].symmetry_advantages: positive`
keeps only the images of turns with a positive advantage (the good moves carried to the
orientations where the policy may never sample them, as self-imitation learning keeps
only the off-policy samples that did better than expected). Measurements:
experiments/tictactoe_seeds/tuning.md.

Needs constrained replies (the reply is the move, nothing else) and one conversation per
turn (`agent.mode: fresh`), checked when the config is read.
"""

from __future__ import annotations

import numpy as np

import games
from training.advantages import TurnSample
from training.sequences import TrainingSequence, render_prompt


def symmetric_sequences(
    samples: list[TurnSample],
    images: dict[str, int],
    tokenizer,
    rng: np.random.Generator,
    positive: frozenset[str] = frozenset(),
) -> list[TrainingSequence]:
    """`images[game]` images of every sample of that game, as training sequences (the originals not included);
    for the games in `positive`, of the samples with an advantage > 0 only."""
    out: list[TrainingSequence] = []
    modules = {name: games.symmetry_module(name) for name, k in images.items() if k}
    for s in samples:
        k = images.get(s.game, 0)
        t = s.turn
        if not k or not t.token_ids or (s.game in positive and s.advantage <= 0):
            continue
        module = modules[s.game]
        move_ids = tokenizer.encode(t.completion, add_special_tokens=False)
        if t.token_ids[: len(move_ids)] != move_ids:
            raise ValueError(
                f"game {s.game}: the reply's tokens do not start with its move {t.completion!r}; symmetries need constrained replies"
            )
        tail = list(t.token_ids[len(move_ids) :])
        for g in rng.choice(np.arange(1, len(module.SYMMETRIES)), size=k, replace=False):
            to = module.SYMMETRIES[int(g)]
            messages = [
                {**m, "content": module.symmetric_text(m["content"], to)}
                if m["role"] == "user"
                else dict(m)
                for m in t.messages
            ]
            move = module.symmetric_move(t.completion, to)
            out.append(
                TrainingSequence(
                    render_prompt(tokenizer, messages),
                    tokenizer.encode(move, add_special_tokens=False) + tail,
                    float(s.advantage),
                    None,
                    [module.symmetric_move(m, to) for m in t.legal_moves]
                    if t.constrained
                    else None,
                    s.value_target,
                )
            )
    return out
