"""The learner on the real tiny Llama: log-probabilities, constraints, micro-batching, LoRA."""

import copy
import math
import time

import pytest
import torch

from agents.constrained import allowed_token_ids
from agents.models import tiny_llama
from core.records import TurnRecord
from training.advantages import TurnSample
from training.learner import Learner
from training.learner_config import LearnerConfig
from training.loss import LossConfig
from training.sequences import TrainingSequence, sequences_from_samples


@pytest.fixture(scope="module")
def tok():
    return tiny_llama(0)[1]


def fresh(seed=0):
    model, _ = tiny_llama(seed)
    return model


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def batch(tok):
    return [
        TrainingSequence(
            ids(tok, "The board is empty. Your move:"),
            ids(tok, " 4 because centre") + [tok.eos_token_id],
            1.0,
        ),
        TrainingSequence(ids(tok, "Hi"), ids(tok, " 2"), -0.5),
        TrainingSequence(
            ids(tok, "A much longer prompt with many more tokens in it, to force padding"),
            ids(tok, " 7 wins"),
            0.25,
        ),
    ]


# --- agents.constrained ------------------------------------------------------------------


def test_allowed_token_ids_walks_the_trie(tok):
    moves = ["<X(0,0)>", "<X(0,1)>", "<O(2,2)>"]
    eos = tok.eos_token_id
    toks = {m: ids(tok, m) for m in moves}
    first = allowed_token_ids(tok, moves, [])
    assert sorted(first) == sorted({t[0] for t in toks.values()})
    full = toks["<X(0,1)>"]
    for j in range(1, len(full)):  # every prefix allows its continuation, never EOS early
        nxt = allowed_token_ids(tok, moves, full[:j])
        assert full[j] in nxt and eos not in nxt
    assert allowed_token_ids(tok, moves, full) == [eos]  # complete: only EOS
    assert allowed_token_ids(tok, moves, full + [eos]) == []
    assert allowed_token_ids(tok, moves, [first[0] + 1 if first[0] + 1 not in first else 0]) == []


def test_allowed_token_ids_prefix_strings_and_cache(tok):
    a, ab = "cat", "catalogue"
    ta, tab = ids(tok, a), ids(tok, ab)
    if (
        tab[: len(ta)] == ta
    ):  # "cat" is a token prefix of "catalogue": both EOS and the continuation
        assert set(allowed_token_ids(tok, [a, ab], ta)) == {tok.eos_token_id, tab[len(ta)]}
    moves = [str(i) for i in range(9)]
    allowed_token_ids(tok, moves, [])
    t0 = time.thread_time()
    for _ in range(10000):
        allowed_token_ids(tok, moves, [])
    assert time.thread_time() - t0 < 0.5  # this thread's CPU; cached: ~microseconds per call


# --- log-probabilities ---------------------------------------------------------------------


def test_logprobs_equal_unpadded_forward(tok):
    model = fresh()
    learner = Learner(model, tok, LearnerConfig(temperature=0.7, precision="float32"))
    seqs = batch(tok)
    got = learner.logprobs(seqs)
    for s, lp in zip(seqs, got):
        x = torch.tensor([s.prompt_ids + s.completion_ids])
        with torch.no_grad():
            logits = model(input_ids=x).logits[0].float() / 0.7
        P = len(s.prompt_ids)
        ref = (
            torch.log_softmax(logits[P - 1 : -1], -1)
            .gather(-1, torch.tensor(s.completion_ids)[:, None])
            .squeeze(-1)
        )
        assert lp == pytest.approx(ref.tolist(), abs=1e-4)


def test_logprobs_match_the_transformers_backend_records(tok):
    from agents.backend import SamplingParams
    from agents.transformers_backend import TransformersBackend

    model = fresh()
    backend = TransformersBackend((model, tok))
    convs = [
        [{"role": "user", "content": "Pick a cell."}],
        [{"role": "user", "content": "Pick a cell, any cell, from 0 to 8."}],
    ]
    gens = backend.generate(convs, SamplingParams(max_new_tokens=6, temperature=0.8, seed=1))
    learner = Learner(model, tok, LearnerConfig(temperature=0.8, precision="float32"))
    seqs = [TrainingSequence(g.prompt_token_ids, g.token_ids, 0.0) for g in gens]
    for g, lp in zip(gens, learner.logprobs(seqs)):
        assert lp == pytest.approx(g.logprobs, abs=1e-4)


def test_constrained_logprobs_use_the_legal_move_mask(tok):
    learner = Learner(fresh(), tok, LearnerConfig())
    moves = ["<X(0,0)>", "<X(1,1)>", "<O(2,2)>"]
    prompt = ids(tok, "Your move:")
    seqs = [
        TrainingSequence(prompt, ids(tok, m) + [tok.eos_token_id], 0.0, allowed=moves)
        for m in moves
    ]
    lps = learner.logprobs(seqs)
    # sequence probabilities under the masked distribution sum to 1 over the legal moves
    assert sum(math.exp(sum(lp)) for lp in lps) == pytest.approx(1.0, abs=1e-5)
    assert lps[0][-1] == pytest.approx(
        0.0, abs=1e-6
    )  # EOS is the only continuation of a whole move
    unmasked = learner.logprobs(
        [TrainingSequence(s.prompt_ids, s.completion_ids, 0.0) for s in seqs]
    )
    assert sum(math.exp(sum(lp)) for lp in unmasked) < 0.01
    bad = TrainingSequence(prompt, ids(tok, "hello") + [tok.eos_token_id], 0.0, allowed=moves)
    with pytest.raises(ValueError, match="leaves the legal moves"):
        learner.logprobs([bad])


def test_constrained_fast_path_equals_the_full_vocabulary_path(tok, monkeypatch):
    import training.logprobs as logprobs_mod

    moves = ["3", "4", "5", "<X(1,1)>"]
    seqs = [
        TrainingSequence(ids(tok, p), ids(tok, m) + [tok.eos_token_id], adv, allowed=moves)
        for p, m, adv in [
            ("Board: . X .", "4", 1.0),
            ("Your move, O:", "<X(1,1)>", -0.5),
            ("Go", "3", 0.3),
        ]
    ]
    cfg = LearnerConfig(
        lr=1e-3, temperature=0.7, loss=LossConfig(entropy_coef=0.01), precision="float32"
    )
    fast, slow = Learner(fresh(), tok, cfg), Learner(fresh(), tok, cfg)
    assert logprobs_mod.plain_lm_head(fast.model) is True
    m_fast = fast.step(seqs)
    monkeypatch.setattr(logprobs_mod, "plain_lm_head", lambda model: False)
    m_slow = slow.step(seqs)
    for key in ("loss", "entropy", "grad_norm"):
        assert m_fast[key] == pytest.approx(m_slow[key], rel=1e-4), key
    for (n, pa), (_, pb) in zip(fast.model.named_parameters(), slow.model.named_parameters()):
        assert torch.allclose(pa.grad, pb.grad, rtol=1e-3, atol=1e-7), n


# --- the update --------------------------------------------------------------------------


def test_micro_batches_accumulate_to_one_batch_step(tok):
    a = Learner(
        fresh(), tok, LearnerConfig(lr=1e-3, micro_batch_tokens=1, precision="float32")
    )  # one row per micro-batch
    b = Learner(fresh(), tok, LearnerConfig(lr=1e-3, micro_batch_tokens=10**6, precision="float32"))
    ma, mb = a.step(batch(tok)), b.step(batch(tok))
    assert ma["loss"] == pytest.approx(mb["loss"], rel=1e-5)
    assert ma["grad_norm"] == pytest.approx(mb["grad_norm"], rel=1e-4)
    # Adam's first step is ~lr * sign(grad), which float noise flips on near-zero grads: compare grads
    for (n, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert torch.allclose(pa.grad, pb.grad, rtol=1e-4, atol=1e-7), n


def test_completion_logprobs_sum_each_completion_and_carry_grad(tok):
    learner = Learner(
        fresh(), tok, LearnerConfig(micro_batch_tokens=16, precision="float32")
    )  # several micro-batches
    seqs = batch(tok)
    parts = list(learner.completion_logprobs(seqs))
    assert len(parts) > 1 and sorted(i for _, index in parts for i in index) == [0, 1, 2]
    per_token = learner.logprobs(seqs)
    for logp, index in parts:
        assert logp.requires_grad
        for b, i in enumerate(
            index
        ):  # padding adds nothing: the sum over the completion's own tokens
            assert float(logp[b].detach()) == pytest.approx(sum(per_token[i]), abs=1e-4)
    parts[0][0].sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in learner.policy.parameters())


def test_steps_move_probability_towards_positive_advantage(tok):
    learner = Learner(fresh(), tok, LearnerConfig(lr=3e-3, loss=LossConfig(dual_clip=1.4)))
    prompt = ids(tok, "Move:")
    good, bad = ids(tok, "4"), ids(tok, "0")  # one token each
    seqs = [TrainingSequence(prompt, good, 1.0), TrainingSequence(prompt, bad, -1.0)]
    before = learner.logprobs(seqs)
    for _ in range(5):
        m = learner.step(
            [TrainingSequence(s.prompt_ids, s.completion_ids, s.advantage) for s in seqs]
        )
    after = learner.logprobs(seqs)
    assert after[0][0] > before[0][0] + 0.1 and after[1][0] < before[1][0] - 0.1
    for key in ("clip_frac", "entropy", "ratio_mean", "approx_kl_behaviour", "grad_norm", "lr"):
        assert key in m and math.isfinite(m[key])
    assert learner.step_count == 5


def test_value_head_learns_value_targets_from_the_prompt(tok):
    learner = Learner(fresh(), tok, LearnerConfig(lr=1e-2, value_coef=1.0))
    moves = ["3", "4"]
    win, lose = ids(tok, "Board: X X . O O . You are X"), ids(tok, "Board: X X . O O . You are O")
    seqs = [
        TrainingSequence(win, ids(tok, "3"), 0.0, allowed=moves, value_target=1.0),
        TrainingSequence(lose, ids(tok, "4"), 0.0, allowed=moves, value_target=-1.0),
    ]
    assert learner.values(seqs) == [0.0, 0.0]  # the head starts at zero
    first = learner.step(seqs)["value_loss"]
    for _ in range(40):
        last = learner.step(seqs)["value_loss"]
    v_win, v_lose = learner.values(seqs)
    assert first == pytest.approx(0.5) and last < 0.1
    assert v_win > 0.5 and v_lose < -0.5
    # the full-vocabulary path reads the same state (the final-norm hidden state of the last prompt token)
    plain = [TrainingSequence(s.prompt_ids, s.completion_ids, 0.0) for s in seqs]
    assert learner.values(plain) == pytest.approx([v_win, v_lose], abs=1e-5)
    with pytest.raises(ValueError, match="no value head"):
        Learner(fresh(), tok, LearnerConfig()).values(seqs)


def test_prepare_freezes_behaviour_logprobs_for_several_steps(tok):
    learner = Learner(
        fresh(), tok, LearnerConfig(lr=1e-2, loss=LossConfig(aggregation="token_mean"))
    )
    seqs = batch(tok)
    learner.prepare(seqs)
    assert all(s.logprobs is not None for s in seqs)
    first = learner.step(seqs)
    second = learner.step(seqs)  # the policy moved: ratios leave 1
    assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert abs(second["ratio_mean"] - 1.0) > 1e-4 and second["approx_kl_behaviour"] > 0


def test_lora_trains_adapters_only_with_base_as_kl_reference(tok):
    model = fresh()
    base = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = LearnerConfig(lr=1e-2, lora_rank=4, loss=LossConfig(kl_coef=0.1), precision="float32")
    learner = Learner(model, tok, cfg)
    m0 = learner.step(batch(tok))
    assert m0["kl_ref"] == pytest.approx(0.0, abs=1e-6)  # LoRA starts as the identity
    for _ in range(3):
        m = learner.step(batch(tok))
    assert m["kl_ref"] > 1e-6
    sd = learner.policy_state_dict()
    assert set(sd) == set(base)  # base-model names, adapters merged in
    assert any(not torch.equal(sd[k], base[k]) for k in base)
    plain = fresh(seed=1)
    plain.load_state_dict(sd)  # a plain model with the merged weights is the same policy
    merged = Learner(plain, tok, LearnerConfig(precision="float32")).logprobs(batch(tok))
    for a, b in zip(merged, learner.logprobs(batch(tok))):
        assert a == pytest.approx(b, abs=1e-4)
    for k, v in learner.model.get_base_model().state_dict().items():  # the base itself is untouched
        if "lora_" not in k:
            assert torch.equal(v, base[k.replace(".base_layer.", ".")]), k


def test_full_finetune_kl_uses_a_frozen_copy(tok):
    learner = Learner(
        fresh(), tok, LearnerConfig(lr=1e-2, loss=LossConfig(kl_coef=0.2, entropy_coef=0.01))
    )
    first = learner.step(batch(tok))
    later = learner.step(batch(tok))
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-6) and later["kl_ref"] > 0


def test_sequences_from_samples(tok):
    constrained = TurnRecord(
        index=0,
        player="p0",
        agent="llm",
        move="4",
        action=4,
        token_ids=[36, 2],
        logprobs=[-0.1, -0.2],
        prompt_token_ids=[1, 2, 3],
        legal_moves=["4", "5"],
        constrained=True,
    )
    free = TurnRecord(
        index=1,
        player="p1",
        agent="llm",
        move="x",
        action=0,
        token_ids=[5],
        logprobs=[-1.0],
        messages=[{"role": "user", "content": "hi"}],
    )
    empty = TurnRecord(index=2, player="p0", agent="bot", move="x", action=0)
    samples = [
        TurnSample(0, k, 0.5, "g", t.player, t) for k, t in enumerate([constrained, free, empty])
    ]
    seqs = sequences_from_samples(samples, tok)
    assert len(seqs) == 2
    assert seqs[0].logprobs is None and seqs[0].allowed == ["4", "5"]  # recomputed under the mask
    assert seqs[1].logprobs == [-1.0] and seqs[1].allowed is None
    assert seqs[1].prompt_ids == tok.apply_chat_template(
        free.messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert sequences_from_samples(samples, tok, recompute="missing")[0].logprobs == [-0.1, -0.2]
    with pytest.raises(ValueError, match="recompute"):
        sequences_from_samples(samples, tok, recompute="sometimes")


def test_uniform_kl_by_hand():
    from training.logprobs import _uniform_kl

    sub = torch.tensor([[0.0, math.log(2.0), -math.inf], [0.0, 0.0, 0.0]])
    valid = torch.tensor([[True, True, False], [True, True, True]])
    kl = _uniform_kl(sub, torch.logsumexp(sub, -1), valid)
    # p = (1/3, 2/3) over 2 allowed: KL(U || p) = (ln(1.5) + ln(0.75)) / 2; uniform over 3: 0
    assert kl.tolist() == pytest.approx([0.5 * math.log(1.125), 0.0], abs=1e-6)


def test_probability_floor_lifts_the_least_likely_legal_move(tok):
    """With zero advantages the floor alone trains: the rarest allowed move gains probability
    (the entropy bonus's pull on it is ~p log p, this one's ~1/K - p)."""
    moves = ["3", "4", "5", "6"]
    prompt = ids(tok, "Board: . X .")
    seqs = [
        TrainingSequence(prompt, ids(tok, m) + [tok.eos_token_id], 0.0, allowed=moves)
        for m in moves
    ]
    learner = Learner(
        fresh(), tok, LearnerConfig(lr=1e-5, precision="float32", loss=LossConfig(floor_coef=1.0))
    )
    before = [math.exp(sum(lp)) for lp in learner.logprobs(seqs)]
    rarest = before.index(min(before))
    m = learner.step(seqs)
    after = [math.exp(sum(lp)) for lp in learner.logprobs(seqs)]
    assert m["uniform_kl"] > 0 and after[rarest] > before[rarest]
    assert learner.step(seqs)["uniform_kl"] < m["uniform_kl"]  # closer to uniform


def test_decaying_floor_is_the_weight_the_loss_uses(tok):
    """floor_decay_steps=1: the first step trains with the full floor, the second with none; with zero
    advantages and no other term the second step's loss is 0 (the floor was all of it)."""
    moves = ["3", "4", "5", "6"]
    seqs = [
        TrainingSequence(
            ids(tok, "Board: . X ."), ids(tok, m) + [tok.eos_token_id], 0.0, allowed=moves
        )
        for m in moves
    ]
    learner = Learner(
        fresh(),
        tok,
        LearnerConfig(
            lr=1e-5, precision="float32", loss=LossConfig(floor_coef=1.0, floor_decay_steps=1)
        ),
    )
    first, second = learner.step(seqs), learner.step(seqs)
    assert (
        first["floor_coef"] == 1.0
        and first["loss"] == pytest.approx(first["uniform_kl"], rel=1e-4)
        and first["loss"] > 0
    )
    assert second["floor_coef"] == 0.0 and second["loss"] == pytest.approx(0.0, abs=1e-7)


def test_probability_floor_is_zero_on_free_text_turns(tok):
    """A batch with no constrained turn (free-text replies) trains with the floor on; it adds nothing."""
    with_floor = Learner(
        fresh(), tok, LearnerConfig(lr=1e-5, precision="float32", loss=LossConfig(floor_coef=1.0))
    )
    without = Learner(
        fresh(),
        tok,
        LearnerConfig(lr=1e-5, precision="float32", loss=LossConfig(entropy_coef=1e-9)),
    )
    m = with_floor.step(batch(tok))
    assert m["uniform_kl"] == 0.0 and m["loss"] == pytest.approx(
        without.step(batch(tok))["loss"], abs=1e-6
    )


def test_adaptive_entropy_bonus_raises_the_coefficient_the_loss_uses(tok):
    fixed = Learner(fresh(), tok, LearnerConfig(lr=1e-3, loss=LossConfig(entropy_coef=0.02)))
    adaptive = Learner(
        fresh(),
        tok,
        LearnerConfig(
            lr=1e-3, loss=LossConfig(entropy_coef=0.02, entropy_target=20.0, entropy_coef_step=0.05)
        ),
    )
    a1, f1 = adaptive.step(batch(tok)), fixed.step(batch(tok))
    assert (
        a1["entropy_coef"] == 0.02
        and a1["entropy"] < 20.0
        and adaptive.entropy_coef == pytest.approx(0.07)
    )
    assert a1["loss"] == pytest.approx(f1["loss"])  # same coefficient on the first step
    a2, f2 = adaptive.step(batch(tok)), fixed.step(batch(tok))
    assert a2["entropy_coef"] == pytest.approx(0.07)
    # the larger bonus lowers the loss by (0.07 - 0.02) x the entropy term
    assert f2["loss"] - a2["loss"] == pytest.approx(0.05 * a2["entropy"], rel=0.05)


def assert_rounded_from(master: torch.Tensor, copied: torch.Tensor, rounding: str) -> None:
    """`copied` is the fp32 `master` itself, or rounded to bf16: to the nearest value, or
    (stochastic) to one of the two bf16 values around it."""
    master = master.detach()
    if copied.dtype == torch.float32 or rounding == "nearest":
        assert torch.equal(copied, master.to(copied.dtype))
        return
    down = master.view(torch.int32) & -65536  # toward zero, then one bf16 step away from it
    around = (down.view(torch.float32), (down + 65536).view(torch.float32))
    assert ((copied.float() == around[0]) | (copied.float() == around[1])).all()


@pytest.mark.parametrize("precision,tol", [("float32", 1e-4), ("bfloat16", 0.02)])
def test_rollout_and_learner_share_numerics_so_the_first_ratio_is_one(tok, precision, tol):
    """The backend samples from the learner's `policy` module (bf16: the bf16 copy of the
    fp32 masters): the behaviour log-probabilities it records are what the learner
    recomputes (bf16: within bf16 rounding of a differently shaped batch), so the first PPO
    update starts at ratio 1 and clips nothing; the masters stay fp32 and the copy follows them."""
    from agents.backend import SamplingParams
    from agents.transformers_backend import TransformersBackend

    learner = Learner(fresh(), tok, LearnerConfig(lr=1e-3, precision=precision))
    assert learner.compute_dtype == precision
    assert {p.dtype for p in learner.policy.parameters()} == {getattr(torch, precision)}
    backend = TransformersBackend((learner.policy, tok))
    convs = [[{"role": "user", "content": f"Pick a cell, game {i}"}] for i in range(6)]
    gens = backend.generate(convs, SamplingParams(max_new_tokens=6, temperature=1.0, seed=3))
    seqs = [
        TrainingSequence(
            g.prompt_token_ids, g.token_ids, 1.0 if i % 2 else -1.0, logprobs=g.logprobs
        )
        for i, g in enumerate(gens)
    ]
    recomputed = learner.logprobs(seqs)
    worst = max(abs(a - b) for g, new in zip(gens, recomputed) for a, b in zip(g.logprobs, new))
    assert worst < tol
    before = [p.detach().clone() for p in learner.model.parameters()]
    first = learner.step(seqs)
    assert first["ratio_mean"] == pytest.approx(1.0, abs=tol) and first["clip_frac"] == 0.0
    assert all(p.dtype == torch.float32 for p in learner.model.parameters())  # fp32 master weights
    assert any(
        not torch.equal(a, p) for a, p in zip(before, learner.model.parameters())
    )  # the step moved them
    for master, copied in zip(
        learner.model.parameters(), learner.policy.parameters()
    ):  # and the copy follows
        assert_rounded_from(master, copied, learner.cfg.bf16_rounding)


def test_bf16_learner_masters_take_updates_too_small_for_bf16(tok):
    """Steps smaller than bf16's resolution accumulate in the fp32 masters (a pure bf16
    optimizer would drop them) and reach the bf16 policy once they add up."""
    learner = Learner(
        fresh(), tok, LearnerConfig(lr=1e-5, precision="bfloat16", bf16_rounding="nearest")
    )
    start = [p.detach().clone() for p in learner.model.parameters()]
    for _ in range(3):
        learner.step(batch(tok))
    moved = [(p - s).abs().max() for p, s in zip(learner.model.parameters(), start)]
    assert all(m > 0 for m in moved)
    norm = learner.model.model.norm.weight  # weights near 1: bf16 resolution 2^-7, far above 3 x lr
    assert (norm - 1).abs().max() < 1e-3 and (norm != 1).any()
    assert torch.equal(learner.policy.model.norm.weight, norm.to(torch.bfloat16))


def test_stochastic_rounding_is_unbiased_and_exact_on_bf16_values():
    from training.precision import stochastic_round

    g = torch.Generator().manual_seed(0)
    x = (
        torch.tensor([1.0 + 2**-9, -(1.0 + 2**-9), 0.3, -5e-5, 2.0])
        .repeat(200_000, 1)
        .T.contiguous()
    )  # (5, 200k)
    r = stochastic_round(x, torch.bfloat16, g)
    assert r.dtype == torch.bfloat16
    assert set(r[0].float().unique().tolist()) == {
        1.0,
        1.0 + 2**-7,
    }  # 1 + 2^-9 lies a quarter of the way up
    assert r[0].float().mean().item() == pytest.approx(
        1.0 + 2**-9, abs=2e-5
    )  # nearest would give exactly 1.0
    assert r[1].float().mean().item() == pytest.approx(-(1.0 + 2**-9), abs=2e-5)
    assert r.float().mean(1)[2:4].tolist() == pytest.approx([0.3, -5e-5], rel=1e-3)
    assert torch.equal(r[4], x[4].to(torch.bfloat16))  # a bf16 value stays as it is
    assert torch.equal(
        stochastic_round(x, torch.bfloat16, torch.Generator().manual_seed(0)), r
    )  # seeded
    out, scratch = (
        torch.empty_like(r),
        torch.full((x.numel() + 7,), 12345, dtype=torch.int32),
    )  # a reused, dirty scratch
    assert (
        stochastic_round(
            x, torch.bfloat16, torch.Generator().manual_seed(0), out=out, scratch=scratch
        )
        is out
    )
    assert torch.equal(out, r)


def test_stochastic_bf16_rounding_lets_the_copy_follow_small_updates_and_a_resume_rounds_alike(tok):
    """With an lr far below bf16's resolution of the norm weights (~1: 2^-8), a nearest-rounded
    copy never moves them; a stochastically rounded one moves some, and a learner loaded
    from the masters at that step rounds them into the same copy."""
    nearest = Learner(
        fresh(), tok, LearnerConfig(lr=2e-4, precision="bfloat16", bf16_rounding="nearest")
    )
    stochastic = Learner(
        fresh(), tok, LearnerConfig(lr=2e-4, precision="bfloat16", bf16_rounding="stochastic")
    )
    for learner in (nearest, stochastic):
        learner.step(batch(tok))
    norm_n, norm_s = nearest.policy.model.norm.weight, stochastic.policy.model.norm.weight
    assert (nearest.model.model.norm.weight != 1).any() and (
        norm_n == 1
    ).all()  # masters moved, copy did not
    assert (norm_s != 1).any()
    resumed = Learner(
        fresh(), tok, LearnerConfig(lr=2e-4, precision="bfloat16", bf16_rounding="stochastic")
    )
    resumed.model.load_state_dict(stochastic.model.state_dict())
    resumed.step_count = stochastic.step_count
    resumed.sync_policy()
    assert all(
        torch.equal(a, b)
        for a, b in zip(resumed.policy.parameters(), stochastic.policy.parameters())
    )


@pytest.mark.parametrize(
    "lora,rounding", [(0, "nearest"), (4, "nearest"), (0, "stochastic"), (4, "stochastic")]
)
def test_bf16_learner_with_kl_reference_starts_at_zero_kl_and_keeps_the_copy_in_step(
    tok, lora, rounding
):
    """The KL reference is the bf16 policy's own start (a bf16 copy, or the LoRA base of the
    copy), so the first KL is exactly 0; only trainable weights move, in masters and copy alike:
    the copy is each master rounded to the nearest bf16, or stochastically to one of the two
    bf16 values around it."""
    learner = Learner(
        fresh(),
        tok,
        LearnerConfig(
            lr=1e-2,
            lora_rank=lora,
            precision="bfloat16",
            bf16_rounding=rounding,
            loss=LossConfig(kl_coef=0.1),
        ),
    )
    assert learner.step(batch(tok))["kl_ref"] == 0.0
    assert learner.step(batch(tok))["kl_ref"] > 0
    masters = dict(learner.model.named_parameters())
    for name, copied in learner.policy.named_parameters():
        assert copied.dtype == torch.bfloat16 and masters[name].dtype == torch.float32
        assert_rounded_from(masters[name], copied, rounding)


def grouped_query(model):
    """The same tiny Llama with 2 key/value heads for its 4 query heads (as SmolLM2's 3 for 9)."""
    from transformers import LlamaForCausalLM

    config = copy.deepcopy(model.config)
    config.num_key_value_heads = 2
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


@pytest.mark.parametrize("lora,gqa", [(0, False), (4, False), (0, True)])
def test_bf16_learner_attention_matches_sdpa_and_leaves_the_rollout_module_as_it_was(
    tok, lora, gqa
):
    """In bf16 on a CPU the learner's own passes use `bf16_eager_attention` (sdpa's CPU kernel
    is no faster in bf16 than fp32): the log-probabilities and gradients agree with sdpa's
    within bf16 rounding, padding included, and the shared policy module (what rollouts
    sample from) keeps its attention implementation outside the learner's passes."""
    model = grouped_query(fresh()) if gqa else fresh()
    learner = Learner(
        model,
        tok,
        LearnerConfig(lr=1e-3, lora_rank=lora, precision="bfloat16", loss=LossConfig(kl_coef=0.1)),
    )
    assert learner.attention == "learner_bf16_eager"
    assert Learner(fresh(), tok, LearnerConfig(precision="float32")).attention is None
    config = learner.policy.config
    assert config._attn_implementation == "sdpa"
    seqs = batch(tok)
    mine = learner.logprobs(seqs)
    assert config._attn_implementation == "sdpa"
    learner.attention = None  # the module's own sdpa
    theirs = learner.logprobs(seqs)
    worst = max(abs(a - b) for m, t in zip(mine, theirs) for a, b in zip(m, t))
    assert 0 < worst < 0.05  # another kernel (so not bit-equal), the same distribution
    (mb,) = learner._micro_batches(seqs)
    grads = {}
    for name in (None, "learner_bf16_eager"):
        learner.attention = name
        learner.policy.zero_grad(set_to_none=True)
        (learner._logprobs(learner.policy, mb, None)[0].sum()).backward()
        grads[name] = torch.cat(
            [p.grad.float().flatten() for p in learner.policy.parameters() if p.grad is not None]
        )
    cos = torch.nn.functional.cosine_similarity(grads[None], grads["learner_bf16_eager"], dim=0)
    assert cos > 0.99
    assert config._attn_implementation == "sdpa"
