"""The learner with `shared_prefix` on the real tiny Llama: the same log-probabilities, loss,
values and gradients as one padded row per sequence, in fewer computed tokens.

The learners run on `ARENA_TEST_DEVICE` (default cpu): `ARENA_TEST_DEVICE=cuda python -m pytest
tests/training/test_shared_prefix_learner.py` checks the same on a CUDA card (docs/guides/gpu.md)."""

import copy
import os

import pytest
import torch

from agents.models import tiny_llama
from training.learner import Learner
from training.learner_config import LearnerConfig
from training.loss import LossConfig
from training.sequences import TrainingSequence

DEVICE = os.environ.get("ARENA_TEST_DEVICE", "cpu")


@pytest.fixture(scope="module")
def tiny():
    """A tiny Llama whose logits are far from uniform (init 0.2), and its tokenizer."""
    return tiny_llama(0, init=0.2)


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def game_batch(tok):
    """A step's sequences: prompts of two seats sharing the rules, a conversation's two
    turns (the second extends the first), a duplicate, a constrained turn, and a sequence that
    shares nothing with the others."""
    rules = ids(tok, "GAME RULES: tic-tac-toe on a 3x3 board; three in a row wins. Answer [cell].")
    eos = tok.eos_token_id
    first = TrainingSequence(
        rules + ids(tok, " You play X. Board: . . . / . . . / . . ."), ids(tok, " [4]") + [eos], 1.0
    )
    later = TrainingSequence(
        first.prompt_ids + first.completion_ids + ids(tok, " O played 0. Board: O . . / . X ."),
        ids(tok, " [8] to block") + [eos],
        0.5,
    )
    moves = ["1", "2", "5"]
    return [
        first,
        later,
        TrainingSequence(
            rules + ids(tok, " You play O. Board: X . ."), ids(tok, " [0]") + [eos], -0.5
        ),
        TrainingSequence(
            rules + ids(tok, " You play O. Board: X . ."), ids(tok, " [0]") + [eos], 0.3
        ),
        TrainingSequence(
            rules + ids(tok, " You play O. Board: . X ."), ids(tok, "5") + [eos], -1.0, None, moves
        ),
        TrainingSequence(ids(tok, "Kuhn poker: you hold K."), ids(tok, " [Bet]"), 0.8),
    ]


def with_values(seqs):
    for s, v in zip(seqs, (0.5, -1.0, 0.2, 0.1, -0.3, 0.9)):
        s.value_target = v
    return seqs


def learners(model, tok, **kw):
    """(per sequence, shared prefix): the same weights; with LoRA the same adapters, their B
    drawn at random rather than zero (so that A has a gradient too)."""
    out = []
    for shared in (False, True):
        torch.manual_seed(1)
        learner = Learner(
            copy.deepcopy(model), tok, LearnerConfig(shared_prefix=shared, **kw), device=DEVICE
        )
        with torch.no_grad():
            for name, p in learner.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.1)
        learner.sync_policy()
        out.append(learner)
    return out


def grads(learner):
    return {n: p.grad for n, p in learner.model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize(
    "precision,lora,micro_batch_tokens",
    [
        ("float32", 0, 8192),
        ("float32", 4, 8192),
        ("bfloat16", 0, 8192),
        ("bfloat16", 4, 8192),
        ("float32", 0, 144),  # micro-batches sharing a trunk (the rules), computed once a pass
        ("bfloat16", 4, 144),
    ],
)
def test_shared_prefix_step_equals_the_per_sequence_step(tiny, precision, lora, micro_batch_tokens):
    """Per-token log-probabilities, the values, the loss with its KL to the reference, the
    entropy and the value loss, and every parameter's gradient: equal within fp32's tolerance
    (another summation order), or bf16's in bf16."""
    model, tok = tiny
    cfg = dict(
        lr=1e-3,
        precision=precision,
        lora_rank=lora,
        value_coef=0.5,
        max_grad_norm=0.0,  # compare the gradients themselves, unclipped
        micro_batch_tokens=micro_batch_tokens,
        loss=LossConfig(kl_coef=0.1, entropy_coef=0.01),
    )
    per, shared = learners(model, tok, **cfg)
    assert not per.shared_prefix and shared.shared_prefix
    seqs = with_values(game_batch(tok))
    mbs = shared._micro_batches(seqs)
    if micro_batch_tokens < 200:  # several micro-batches, the rules in their trunk
        assert len(mbs) > 1 and all(mb.trunk is mbs[0].trunk is not None for mb in mbs)
    one_batch = Learner(
        copy.deepcopy(model), tok, LearnerConfig(micro_batch_tokens=8192), device=DEVICE
    )
    assert shared.computed_tokens(seqs) == one_batch.computed_tokens(seqs)  # each token once
    assert shared.computed_tokens(seqs) < 0.6 * per.computed_tokens(seqs)
    fp32 = precision == "float32"
    tol = 1e-5 if fp32 else 0.05  # bf16: 8 mantissa bits, through every layer
    a, b = per.logprobs(seqs), shared.logprobs(seqs)
    assert [len(x) for x in a] == [len(x) for x in b] == [len(s.completion_ids) for s in seqs]
    assert max(abs(x - y) for u, v in zip(a, b) for x, y in zip(u, v)) < tol
    ra, rb = per.logprobs(seqs, reference=True), shared.logprobs(seqs, reference=True)
    assert max(abs(x - y) for u, v in zip(ra, rb) for x, y in zip(u, v)) < tol
    ma, mb = per.step(seqs), shared.step(seqs)  # (the value head starts at zero)
    for key in ("loss", "kl_ref", "entropy", "value_loss", "grad_norm"):
        assert mb[key] == pytest.approx(ma[key], rel=1e-4 if fp32 else 0.02, abs=1e-7), key
    ga, gb = grads(per), grads(shared)
    assert ga.keys() == gb.keys() and len(ga) > 0
    for name in ga:
        scale = float(ga[name].abs().max())
        assert scale > 0, name
        if fp32:
            torch.testing.assert_close(gb[name], ga[name], rtol=1e-4, atol=1e-5 * scale)
        else:  # the gradient rounded in bf16: its direction and size, within bf16's error
            assert float((gb[name] - ga[name]).norm() / ga[name].norm()) < 0.03, name
    assert shared.values(seqs) == pytest.approx(per.values(seqs), abs=1e-5 if fp32 else 0.02)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("micro_batch_tokens", [8192, 144])
def test_first_update_on_its_own_behaviour_logprobs_has_ratio_exactly_one(
    tiny, precision, micro_batch_tokens
):
    """Behaviour log-probabilities recorded by the shared-prefix learner (`prepare`) are the
    ones its step recomputes, bit for bit: the first PPO ratio is exactly 1, nothing clips."""
    model, tok = tiny
    cfg = LearnerConfig(
        lr=1e-3,
        precision=precision,
        micro_batch_tokens=micro_batch_tokens,
        loss=LossConfig(kl_coef=0.1),
    )
    learner = Learner(copy.deepcopy(model), tok, cfg, device=DEVICE)
    seqs = game_batch(tok)
    learner.prepare(seqs)
    first = learner.step(seqs)
    assert first["ratio_min"] == first["ratio_max"] == 1.0 and first["clip_frac"] == 0.0
    second = learner.step(seqs)
    assert second["ratio_max"] > 1.0 or second["ratio_min"] < 1.0  # the policy moved


def test_a_conversation_is_scored_in_one_pass_over_its_last_turn(tiny):
    """multi_turn: each turn's prompt is the last turn's prompt, reply and the new observation;
    every turn's reply is scored from one pass over the final conversation."""
    model, tok = tiny
    eos = tok.eos_token_id
    prompt = ids(tok, "<|im_start|>system\nRules.<|im_end|>\n<|im_start|>user\nBoard 1")
    turns = []
    for k in range(4):
        reply = ids(tok, f" [{k}]") + [eos]
        turns.append(TrainingSequence(list(prompt), reply, 1.0))
        prompt = prompt + reply + ids(tok, f"\n<|im_start|>user\nBoard {k + 2}")
    per, shared = learners(model, tok, precision="float32")
    last = turns[-1]
    assert shared.computed_tokens(turns) == len(last.prompt_ids) + len(last.completion_ids) - 1
    assert per.computed_tokens(turns) > 2 * shared.computed_tokens(turns)
    a, b = per.logprobs(turns), shared.logprobs(turns)
    assert max(abs(x - y) for u, v in zip(a, b) for x, y in zip(u, v)) < 1e-5


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_shared_prefix_with_the_memory_options_takes_the_same_steps(tiny, precision):
    """Gradient checkpointing (each layer recomputed in the backward, the tree's gathered past
    with it) and an offloaded optimizer change no number of a shared-prefix step: the same
    losses and, after two steps, the very same weights, micro-batches sharing a trunk. On a
    GPU the offloaded optimizer steps on the host (another summation order for the gradient
    norm and AdamW): there the losses and norms agree within fp32's rounding and each
    weight's two updates within 0.1% of their size."""
    model, tok = tiny
    seqs = game_batch(tok)

    def learner(**options):
        cfg = LearnerConfig(
            lr=1e-3,
            precision=precision,
            micro_batch_tokens=144,
            loss=LossConfig(kl_coef=0.1, entropy_coef=0.01),
            **options,
        )
        return Learner(copy.deepcopy(model), tok, cfg, device=DEVICE)

    plain = learner()
    lean = learner(gradient_checkpointing=True, offload_optimizer=True)
    assert lean.shared_prefix and lean.policy.is_gradient_checkpointing
    assert lean._micro_batches(seqs)[0].trunk is not None
    exact = plain.master_device == lean.master_device  # both on the CPU
    start = {k: v.detach().float().cpu().clone() for k, v in model.state_dict().items()}
    for _ in range(2):
        a, b = plain.step(seqs), lean.step(seqs)
        if exact:
            assert a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"]
        else:
            assert b["loss"] == pytest.approx(a["loss"], rel=1e-6)
            assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5)
    for (name, x), y in zip(plain.model.state_dict().items(), lean.model.state_dict().values()):
        if exact:
            assert torch.equal(x, y), name
        elif name in start:  # each weight's two updates the same within 0.1% of their size
            moved = float((x.cpu() - start[name]).norm())
            assert float((y.cpu() - x.cpu()).norm()) <= 1e-3 * moved + 1e-7, name


def test_the_magnet_term_is_the_same_with_a_shared_prefix(tiny):
    """The magnet (Magnetic Mirror Descent) reads its own pass, not the policy's shared trunk:
    with micro-batches sharing a trunk, the magnet KL, the loss and every gradient, before and
    after the magnet's refresh, equal the per-sequence learner's within fp32's tolerance."""
    model, tok = tiny
    cfg = dict(
        lr=1e-2,
        precision="float32",
        max_grad_norm=0.0,
        micro_batch_tokens=144,
        magnet_every=2,
        loss=LossConfig(magnet_coef=0.5),
    )
    per, shared = learners(model, tok, **cfg)
    seqs = game_batch(tok)  # free-text turns too: no move distribution, no magnet term
    rules = ids(tok, "GAME RULES: tic-tac-toe on a 3x3 board; three in a row wins. Answer [cell].")
    eos = tok.eos_token_id
    for board, move, adv in ((" . . X", "1", 0.7), (" X . .", "2", -0.4), (" . X .", "5", 0.2)):
        prompt = rules + ids(tok, f" You play O. Board:{board}")
        seqs.append(TrainingSequence(prompt, ids(tok, move) + [eos], adv, None, ["1", "2", "5"]))
    mbs = shared._micro_batches(seqs)
    assert len(mbs) > 1 and all(mb.trunk is mbs[0].trunk is not None for mb in mbs)
    kls = []
    for _ in range(3):  # the policy leaves the magnet, then the magnet refreshes (after step 2)
        ma, mb = per.step(seqs), shared.step(seqs)
        for key in ("loss", "magnet_kl"):
            assert mb[key] == pytest.approx(ma[key], rel=1e-4, abs=1e-7), key
        kls.append(ma["magnet_kl"])
        ga, gb = grads(per), grads(shared)
        for name in ga:  # after the first step the weights differ by the summation order's
            scale = float(ga[name].abs().max())  # rounding, through Adam: a looser bound
            atol = (1e-5 if len(kls) == 1 else 1e-4) * scale + 1e-12
            torch.testing.assert_close(gb[name], ga[name], rtol=1e-4, atol=atol)
    assert kls[1] > 1e-4 and kls[2] < 1e-9  # live at step 2; the refreshed magnet is the policy


def test_shared_prefix_auto_is_on_on_a_cpu_and_a_bad_value_is_refused(tiny):
    """`shared_prefix: auto` (the default) shares on a CPU; a value other than true, false or
    auto is a one-line error, from a config file too."""
    from training.config import load_config

    model, tok = tiny
    assert LearnerConfig().shared_prefix == "auto"
    assert Learner(copy.deepcopy(model), tok, LearnerConfig(), device="cpu").shared_prefix
    assert not Learner(
        copy.deepcopy(model), tok, LearnerConfig(shared_prefix=False), device="cpu"
    ).shared_prefix
    with pytest.raises(
        ValueError, match="shared_prefix must be one of true, false, auto, got 'yes'"
    ):
        LearnerConfig(shared_prefix="yes")
    with pytest.raises(ValueError, match="learner.shared_prefix must be one of true, false, auto"):
        load_config("configs/train_tictactoe_tiny.yaml", {"learner": {"shared_prefix": "always"}})


@pytest.mark.parametrize("micro_batch_tokens", [144, 400])
def test_a_tree_micro_batch_computes_at_most_half_the_budget(tiny, micro_batch_tokens):
    """A tree micro-batch's own segments plus the trunk it reads hold at most half of
    `micro_batch_tokens` distinct tokens (its rows carry no padding, so the full budget held
    more than a padded micro-batch), unless one sequence alone is longer."""
    model, tok = tiny
    _, shared = learners(model, tok, micro_batch_tokens=micro_batch_tokens)
    seqs = game_batch(tok)
    mbs = shared._micro_batches(seqs)
    trunk = mbs[0].trunk.plan.distinct_tokens() if mbs[0].trunk else 0
    assert sorted(i for mb in mbs for i in mb.index) == list(range(len(seqs)))
    for mb in mbs:
        longest = max(len(seqs[i].prompt_ids) + len(seqs[i].completion_ids) - 1 for i in mb.index)
        assert trunk + mb.plan.distinct_tokens() <= max(micro_batch_tokens // 2, longest)
    per = Learner(copy.deepcopy(model), tok, LearnerConfig(micro_batch_tokens=micro_batch_tokens))
    assert len(mbs) >= len(per._micro_batches(seqs))  # the halved budget: at least as many passes
