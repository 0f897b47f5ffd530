"""TransformersBackend on a tiny random Llama (SmolLM2 tokenizer): real forward passes."""

from __future__ import annotations

import math
import random

import pytest
import torch

from agents.backend import SamplingParams
from agents.models import tiny_llama
from agents.transformers_backend import TransformersBackend


def sharpened_tiny(seed: int = 0):
    """tiny_llama with large non-embedding weights: a random init only echoes the last
    prompt token, which would make greedy tests trivial; this one writes varied text."""
    model, tok = tiny_llama(seed)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model, tok


@pytest.fixture(scope="module")
def backend():
    return TransformersBackend(sharpened_tiny(0))


def conv(text: str) -> list[dict]:
    return [
        {"role": "system", "content": "You play tic-tac-toe."},
        {"role": "user", "content": text},
    ]


CONVS = [
    conv("Your move."),
    conv("The board is empty. " * 6 + "Your move?"),
    conv("x"),
    conv("Pick a cell from 0 to 8, please."),
]


def recomputed_logprobs(
    backend, prompt: list[int], completion: list[int], temperature: float
) -> list[float]:
    """Logprobs of `completion` from one forward pass over prompt + completion (no padding)."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = backend.model(input_ids=ids).logits[0].float()  # (T, V)
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1] / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(completion).view(-1, 1)).squeeze(-1).tolist()


def test_batch_left_padding_gives_same_greedy_completion_as_alone(backend):
    params = SamplingParams(max_new_tokens=12, temperature=0)
    batch = backend.generate(CONVS, params)
    assert len(batch) == len(CONVS)
    assert len({len(g.prompt_token_ids) for g in batch}) > 1  # prompts really differ in length
    for c, g in zip(CONVS, batch):
        alone = backend.generate([c], params)[0]
        assert g.prompt_token_ids == backend.encode(c)
        assert g.token_ids == alone.token_ids
        assert g.logprobs == pytest.approx(alone.logprobs, abs=1e-3)
        assert len(g.token_ids) == len(g.logprobs) == 12 and g.finish_reason == "length"
        assert backend.pad_id not in g.token_ids
        assert g.text == backend.tokenizer.decode(g.token_ids, skip_special_tokens=True)
    assert len({tuple(g.token_ids) for g in batch}) > 1  # the model writes varied text


def test_logprobs_match_a_recomputed_forward_pass(backend):
    for params, temp in (
        (SamplingParams(max_new_tokens=10, temperature=0.7, top_p=0.9, seed=1), 0.7),
        (SamplingParams(max_new_tokens=10, temperature=0), 1.0),
    ):  # greedy: logprobs at T=1
        for g in backend.generate(CONVS, params):
            expected = recomputed_logprobs(backend, g.prompt_token_ids, g.token_ids, temp)
            assert g.logprobs == pytest.approx(expected, abs=1e-3)
    # constrained: still the full-vocabulary distribution (what a learner recomputes), not the masked one
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=2)
    for g in backend.generate(
        CONVS, params, allowed=[["Cooperate", "Defect", "10", "1"]] * len(CONVS)
    ):
        assert g.logprobs == pytest.approx(
            recomputed_logprobs(backend, g.prompt_token_ids, g.token_ids, 1.0), abs=1e-3
        )
        assert g.logprobs[0] < -2  # far below the masked distribution's log(1/4)


def test_greedy_picks_the_argmax_and_tiny_top_p_is_greedy(backend):
    greedy = backend.generate(CONVS, SamplingParams(max_new_tokens=6, temperature=0))
    nucleus = backend.generate(
        CONVS, SamplingParams(max_new_tokens=6, temperature=1.0, top_p=1e-6, seed=0)
    )
    for g, n in zip(greedy, nucleus):
        assert g.token_ids == n.token_ids
        ids = torch.tensor([g.prompt_token_ids + g.token_ids[:1]])
        with torch.no_grad():
            first = backend.model(input_ids=ids).logits[0, len(g.prompt_token_ids) - 1]
        assert g.token_ids[0] == int(first.argmax())


def test_seeded_sampling_reproduces_and_seeds_differ(backend):
    def run(seed):
        return [
            g.token_ids
            for g in backend.generate(
                CONVS, SamplingParams(max_new_tokens=12, temperature=1.0, seed=seed)
            )
        ]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_constrained_completion_is_always_one_allowed_string(backend):
    rng = random.Random(0)
    pool = [
        "1",
        "10",
        "100",
        "12",
        "2",
        "Cooperate",
        "Defect",
        "<X(0,1)>",
        "Offer: 3 Sheep -> 5 Brick",
        " 7",
        "Fold",
        "Fo",
        "call",
        "Call",
        "café",
        "a b",
        "[4]",
    ]
    for temperature, top_p in ((1.0, 1.0), (0.0, 1.0), (1.5, 0.8)):
        allowed = [rng.sample(pool, rng.randint(1, 6)) for _ in range(24)]
        allowed[0] = ["1", "10"]  # one a prefix of the other
        allowed[1] = ["Fo", "Fold"]
        params = SamplingParams(max_new_tokens=16, temperature=temperature, top_p=top_p, seed=3)
        gens = backend.generate(
            [CONVS[i % len(CONVS)] for i in range(len(allowed))], params, allowed=allowed
        )
        for a, g in zip(allowed, gens):
            assert g.text in a, (g.text, a)
            assert g.finish_reason == "stop" and g.token_ids[-1] == backend.tokenizer.eos_token_id
            assert len(g.logprobs) == len(g.token_ids)
    # every string of a prefix pair is reachable by sampling
    gens = backend.generate(
        [CONVS[0]] * 64,
        SamplingParams(max_new_tokens=4, temperature=1.0, seed=0),
        allowed=[["1", "10"]] * 64,
    )
    assert {g.text for g in gens} == {"1", "10"}


def test_rows_finishing_early_do_not_disturb_the_others(backend):
    """Constrained rows stop after 2 tokens and are dropped from the batch and KV cache;
    the unconstrained rows must still match their solo completions."""
    params = SamplingParams(max_new_tokens=10, temperature=0)
    allowed = [["4"], None, ["Cooperate", "Defect"], None]
    batch = backend.generate(CONVS, params, allowed=allowed)
    for c, a, g in zip(CONVS, allowed, batch):
        alone = backend.generate([c], params, allowed=[a])[0]
        assert g.token_ids == alone.token_ids
        assert g.logprobs == pytest.approx(alone.logprobs, abs=1e-3)
    assert batch[0].text == "4" and batch[0].token_ids == [
        backend.tokenizer.encode("4")[0],
        backend.tokenizer.eos_token_id,
    ]
    assert batch[1].finish_reason == "length" and len(batch[1].token_ids) == 10


def test_in_place_weight_updates_are_seen_and_mode_is_restored():
    model, tok = sharpened_tiny(1)
    backend = TransformersBackend((model, tok))
    assert backend.model is model and backend.tokenizer is tok
    params = SamplingParams(max_new_tokens=8, temperature=0)
    before = backend.generate(CONVS, params)
    with torch.no_grad():  # what a learner's optimizer step does: same tensors, new values
        for p in model.parameters():
            if p.dim() == 2 and p.shape[0] != len(tok):
                p.mul_(-1.5)
    model.train()
    after = backend.generate(CONVS, params)
    assert [g.token_ids for g in before] != [g.token_ids for g in after]
    assert model.training  # generation ran in eval mode and restored the learner's mode


def test_split_batches_match_one_batch():
    backend = TransformersBackend(sharpened_tiny(0), max_batch_size=3)
    params = SamplingParams(max_new_tokens=6, temperature=0)
    whole = TransformersBackend((backend.model, backend.tokenizer)).generate(CONVS * 2, params)
    split = backend.generate(CONVS * 2, params)
    assert [g.token_ids for g in split] == [g.token_ids for g in whole]


@pytest.mark.parametrize(
    "args, message",
    [
        (([], SamplingParams()), "non-empty list"),
        (([[{"content": "hi"}]], SamplingParams()), "role"),
        (([conv("a")], SamplingParams(temperature=-1)), "temperature"),
        (([conv("a")], SamplingParams(top_p=0)), "top_p"),
        (([conv("a")], SamplingParams(max_new_tokens=0)), "max_new_tokens"),
        (([conv("a")], SamplingParams(), [["1"], ["2"]]), "allowed has 2"),
        (([conv("a")], SamplingParams(), [[]]), "non-empty list of non-empty strings"),
    ],
)
def test_bad_input_is_a_clear_value_error(backend, args, message):
    with pytest.raises(ValueError, match=message):
        backend.generate(*args)


def test_bad_model_argument():
    with pytest.raises(ValueError, match="name or a \\(model, tokenizer\\) pair"):
        TransformersBackend(42)


def test_tiny_llama_shape_comes_from_the_name():
    from agents.models import load_model

    model, _ = load_model("tiny-llama:seed=1:hidden=32:heads=2:layers=3:init=0.05")
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_hidden_layers) == (32, 2, 3)
    assert 0.04 < model.model.layers[0].mlp.up_proj.weight.std().item() < 0.06
    seed1, _ = load_model("tiny-llama:1")  # a seed alone: the default shape, seeded weights
    seed2, _ = load_model("tiny-llama:2")
    assert seed1.config.hidden_size == 64
    assert not torch.equal(seed1.model.embed_tokens.weight, seed2.model.embed_tokens.weight)
    for bad, message in [
        ("tiny-llama:x", "tiny-llama:<seed>"),
        ("tiny-llama:width=3", "unknown tiny-llama field 'width'"),
        ("tiny-llama:hidden=big", "hidden must be a number"),
    ]:
        with pytest.raises(ValueError, match=message):
            load_model(bad)


def test_shared_prefix_groups_pick_the_runs_that_save_tokens():
    from agents.transformers_backend import shared_prefix_groups

    a = [1] * 20
    prompts = [a + [5, 6], [9, 9, 9], a + [7], a[:10] + [3] * 30, a[:10] + [3] * 30 + [4]]
    groups = {tuple(sorted(g)): n for g, n in shared_prefix_groups(prompts, min_length=8)}
    # rows 0 and 2 share 20 tokens; rows 3 and 4 share 40 (row 3 keeps its last token: 39)
    assert groups == {(0, 2): 20, (3, 4): 39}
    assert shared_prefix_groups(prompts, min_length=50) == []  # nothing long enough
    assert shared_prefix_groups([a], min_length=1) == []  # one row: nothing to share
    assert shared_prefix_groups([a, a], min_length=1) == [([0, 1], 19)]  # identical prompts


def test_prefix_sharing_gives_the_same_generations_as_whole_prompts():
    from agents.transformers_backend import shared_prefix_groups

    model, tok = sharpened_tiny(1)
    shared, whole = (
        TransformersBackend((model, tok)),
        TransformersBackend((model, tok), share_prefixes=False),
    )
    rules = "Tic-tac-toe. Three in a row wins; the loser gets -1; a full board is a draw. "
    convs = [
        [
            {"role": "system", "content": rules + f"You play {mark}."},
            {"role": "user", "content": board},
        ]
        for mark in ("X", "O")
        for board in ("Empty board.", "X in the centre, your move", "O 0, X 4, X 8")
    ]
    convs.insert(
        2,
        [
            {"role": "system", "content": "Something else entirely."},
            {"role": "user", "content": "Hi."},
        ],
    )
    groups = shared_prefix_groups([shared.encode(c) for c in convs], shared.min_shared_prefix)
    assert groups and 2 not in [
        i for g, _ in groups for i in g
    ]  # a row outside every group rides along
    params = SamplingParams(max_new_tokens=10, temperature=0)
    got, want = shared.generate(convs, params), whole.generate(convs, params)
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)
    sampled = SamplingParams(max_new_tokens=10, temperature=1.0, seed=3)
    assert [g.token_ids for g in shared.generate(convs, sampled)] == [
        g.token_ids for g in whole.generate(convs, sampled)
    ]


def test_cdf_sampling_follows_the_probabilities_and_never_picks_a_zero():
    from agents.transformers_backend import _sample

    probs = torch.tensor([[0.0, 0.2, 0.0, 0.5, 0.3, 0.0]]).repeat(100_000, 1)
    counts = (
        torch.bincount(_sample(probs, torch.Generator().manual_seed(0)), minlength=6).float()
        / 100_000
    )
    assert counts[[0, 2, 5]].sum() == 0
    assert counts[[1, 3, 4]].tolist() == pytest.approx([0.2, 0.5, 0.3], abs=0.01)


def test_grouped_query_attention_without_copies_gives_the_same_logits():
    from transformers import LlamaConfig, LlamaForCausalLM

    from agents.transformers_backend import CPU_SDPA, use_cpu_decode_sdpa

    cfg = LlamaConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 300, (3, 12))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding: a mask reaches the attention
    with torch.no_grad():
        prefill = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], use_cache=True)
        want = model(
            input_ids=ids[:, -1:], attention_mask=mask, past_key_values=prefill.past_key_values
        ).logits
        assert use_cpu_decode_sdpa(model) and model.config._attn_implementation == CPU_SDPA
        prefill = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], use_cache=True)
        got = model(
            input_ids=ids[:, -1:], attention_mask=mask, past_key_values=prefill.past_key_values
        ).logits
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("kv_heads", [3, 9])
@pytest.mark.parametrize("mask", ["bool", "additive", None])
def test_bf16_decode_attention_is_the_learners_bf16_arithmetic(kv_heads, mask):
    """A bf16 decoding step attends with plain bf16 matmuls (torch's CPU SDPA is 17x slower
    there): the learner's bf16 eager attention on the same query, keys and values, and
    within bf16 rounding of fp32 attention, with or without a padding mask."""
    from agents.transformers_backend import bf16_decode_attention
    from training.precision import bf16_eager_attention

    torch.manual_seed(0)
    b, heads, t, d = 4, 9, 37, 64
    q = torch.randn(b, heads, 1, d).bfloat16()
    k, v = torch.randn(b, kv_heads, t, d).bfloat16(), torch.randn(b, kv_heads, t, d).bfloat16()
    keep = torch.ones(b, 1, 1, t, dtype=torch.bool)
    keep[0, ..., :5] = False  # row 0 left-padded
    m = {
        "bool": keep,
        "additive": torch.zeros(b, 1, 1, t).masked_fill(~keep, torch.finfo(torch.float32).min),
        None: None,
    }[mask]
    got = bf16_decode_attention(q, k, v, m)
    assert got.shape == (b, 1, heads, d) and got.dtype == torch.bfloat16
    additive = (
        None
        if m is None
        else torch.zeros(b, 1, 1, t, dtype=torch.bfloat16).masked_fill(
            ~keep, torch.finfo(torch.bfloat16).min
        )
    )
    eager = bf16_eager_attention(torch.nn.Module(), q, k, v, additive, scaling=d**-0.5)[0]
    assert (got.float() - eager.float()).abs().max() <= 0.02
    exact = torch.nn.functional.scaled_dot_product_attention(
        q.float(),
        k.float(),
        v.float(),
        enable_gqa=kv_heads < heads,
        attn_mask=None if m is None else keep,
    ).transpose(1, 2)
    assert (got.float() - exact).abs().max() <= 0.03
    if m is not None:  # the padded positions take no weight: changing them changes nothing
        k2, v2 = k.clone(), v.clone()
        k2[0, :, :5], v2[0, :, :5] = 100.0, 100.0
        assert torch.equal(bf16_decode_attention(q, k2, v2, m), got)


def test_agent_spec_dtype_loads_the_weights_in_that_dtype_with_a_backend_each():
    """`llm:MODEL,dtype=...` is a backend option: bf16 and fp32 agents on one model get
    backends of their own (weights in that dtype); the same spec shares one; a typo is one line."""
    from agents import make_agent

    bf16, fp32 = (
        make_agent("llm:tiny-llama,dtype=bfloat16"),
        make_agent("llm:tiny-llama,dtype=float32,temperature=0"),
    )
    assert {p.dtype for p in bf16.backend.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in fp32.backend.model.parameters()} == {torch.float32}
    assert make_agent("llm:tiny-llama,dtype=bfloat16,temperature=0").backend is bf16.backend
    gens = bf16.backend.generate(
        [[{"role": "user", "content": "Pick a cell."}]], SamplingParams(max_new_tokens=4, seed=0)
    )
    assert len(gens[0].token_ids) > 0 and all(math.isfinite(x) and x <= 0 for x in gens[0].logprobs)
    with pytest.raises(ValueError, match="must be one of auto, float32, bfloat16, got 'bf16'"):
        make_agent("llm:tiny-llama,dtype=bf16")


def test_prompt_cache_prefills_each_distinct_prompt_once_and_gives_the_same_generations():
    model, tok = sharpened_tiny(2)
    cached, plain = TransformersBackend((model, tok)), TransformersBackend((model, tok))
    prefilled: list[int] = []
    inner = cached._prefill_batch
    cached._prefill_batch = lambda prompts: (prefilled.append(len(prompts)), inner(prompts))[1]
    batches = [
        [CONVS[0], CONVS[1], CONVS[0], CONVS[2]],
        [CONVS[1], CONVS[3], CONVS[0]],  # one new prompt among two seen ones
        [CONVS[2], CONVS[2]],  # every prompt seen
    ]
    greedy = SamplingParams(max_new_tokens=8, temperature=0)
    sampled = SamplingParams(max_new_tokens=8, temperature=1.0, seeds=[5, 6, 7, 8])
    allowed = [["0", "4", "8"], None, ["4", "40"], None]
    with cached.prompt_cache():
        for convs in batches:
            got, want = cached.generate(convs, greedy), plain.generate(convs, greedy)
            for g, w in zip(got, want):
                assert g.token_ids == w.token_ids
                assert g.prompt_token_ids == w.prompt_token_ids
                assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)
        assert prefilled == [3, 1]  # distinct new prompts only; the third batch ran none
        got = cached.generate(CONVS, sampled, allowed)
        want = plain.generate(CONVS, sampled, allowed)
        assert [g.token_ids for g in got] == [w.token_ids for w in want]
        args = (CONVS[:1] * 2, [["0", "4", "8"]] * 2, 1.0)
        for got_d, want_d in zip(cached.move_distributions(*args), plain.move_distributions(*args)):
            assert got_d == pytest.approx(want_d, abs=1e-5)
        assert prefilled == [3, 1]
    assert cached._prompts is None  # dropped with the block: later calls prefill anew
    cached.generate(CONVS[:1], greedy)
    assert prefilled == [3, 1, 1]


def test_prompt_cache_blocks_do_not_nest_and_a_full_cache_prefills_as_usual():
    model, tok = sharpened_tiny(2)
    backend = TransformersBackend((model, tok))
    with backend.prompt_cache():
        with pytest.raises(RuntimeError, match="do not nest"):
            with backend.prompt_cache():
                pass
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    want = backend.generate(CONVS, greedy)
    calls: list[int] = []
    inner = backend._prefill_batch
    backend._prefill_batch = lambda prompts: (calls.append(len(prompts)), inner(prompts))[1]
    with backend.prompt_cache(max_mb=1e-6):  # no prompt fits
        got = backend.generate(CONVS, greedy)
        assert backend._prompts == {} and calls == [4, 4]  # the misses, then the batch as usual
        backend.generate(CONVS, greedy)
        assert calls == [4, 4, 4]  # once full, a batch is prefilled once
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
