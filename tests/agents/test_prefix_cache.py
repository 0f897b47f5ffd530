"""The prefix KV cache: the radix tree on its own, then the transformers backend with the
cache against the same backend without it (tiny random Llama, SmolLM2 tokenizer, real
forward passes)."""

from __future__ import annotations

import pytest
import torch

from agents.backend import SamplingParams
from agents.prefix_cache import PrefixCache
from agents.transformers_backend import TransformersBackend
from tests.agents.test_transformers_backend import sharpened_tiny

# --- the radix tree ---------------------------------------------------------------------------


def token_kv(tokens: list[int] | tuple[int, ...]) -> torch.Tensor:
    """Two layers of fake keys and values that spell the tokens: (2 layers, 2, 1 head, T, 1 dim)."""
    t = torch.tensor(tokens, dtype=torch.float32).view(1, -1, 1)
    return torch.stack([torch.stack((t, -t)), torch.stack((2 * t, -2 * t))])


def insert(cache: PrefixCache, tokens: list[int], space="s") -> list[tuple[int, int]]:
    """Insert `tokens`; returns the (i, j) ranges the cache asked keys and values for."""
    asked = []

    def kv_of(i, j):
        asked.append((i, j))
        return token_kv(tokens[i:j])

    cache.insert(space, tokens, kv_of)
    return asked


def looked_up(cache: PrefixCache, tokens: list[int], limit: int, space="s") -> list[int]:
    """The tokens whose keys a lookup copies, read back from a batch tensor."""
    hit = cache.lookup(space, tokens, limit)
    batch = torch.zeros(2, 2, 1, 1, hit.length, 1)  # (layers, keys/values, B, heads, W, dim)
    hit.copy_into(batch, 0, hit.length)
    keys = batch[0, 0]
    assert torch.equal(batch[0, 1], -keys)
    assert torch.equal(batch[1, 0], 2 * keys) and torch.equal(batch[1, 1], -2 * keys)
    return [int(x) for x in keys.flatten()]


BYTES_PER_TOKEN = 4 * 4  # two layers of keys and values, one float32 each


def test_lookup_finds_the_longest_cached_prefix_across_splits():
    cache = PrefixCache(10**6)
    assert insert(cache, [1, 2, 3, 4, 5]) == [(0, 5)]
    assert insert(cache, [1, 2, 3, 9]) == [(3, 4)]  # splits [1..5] after 3
    assert insert(cache, [1, 2]) == []  # already a prefix
    assert insert(cache, [7, 8]) == [(0, 2)]
    assert looked_up(cache, [1, 2, 3, 4, 5, 6], 6) == [1, 2, 3, 4, 5]
    assert looked_up(cache, [1, 2, 3, 9, 9], 5) == [1, 2, 3, 9]
    assert looked_up(cache, [1, 2, 3, 4, 5], 4) == [1, 2, 3, 4]  # held to the limit
    assert looked_up(cache, [1, 2, 6], 3) == [1, 2]
    assert looked_up(cache, [5, 1], 2) == []
    assert looked_up(cache, [1, 2, 3], 3, space="other") == []
    assert cache.tokens() == 8  # 1 2 3 | 4 5 | 9 | 7 8: the shared opening once
    assert cache.nbytes == 8 * BYTES_PER_TOKEN


def test_eviction_drops_least_recently_used_leaves_and_stays_under_the_bound():
    cache = PrefixCache(10 * BYTES_PER_TOKEN)
    insert(cache, [1, 2, 3, 4])
    insert(cache, [1, 2, 5, 6])
    insert(cache, [8, 9])
    looked_up(cache, [1, 2, 3, 4], 4)  # [1, 2, 5, 6] and [8, 9] are now the oldest
    insert(cache, [1, 2, 3, 4, 7, 7])  # 10 tokens: fits exactly
    assert cache.nbytes == 10 * BYTES_PER_TOKEN
    insert(cache, [4, 4])  # 12: the oldest leaf ([5, 6]) goes
    assert cache.nbytes <= cache.max_bytes
    assert looked_up(cache, [1, 2, 5, 6], 4) == [1, 2]
    assert looked_up(cache, [8, 9], 2) == [8, 9]
    insert(cache, list(range(20, 31)))  # larger than the bound on its own: not kept
    assert looked_up(cache, list(range(20, 31)), 11) == []
    assert cache.nbytes <= cache.max_bytes
    cache.validate("weights 1")
    assert cache.nbytes == 0 and looked_up(cache, [8, 9], 2) == []


# --- the backend -------------------------------------------------------------------------------

GREEDY = SamplingParams(max_new_tokens=6, temperature=0, top_logprobs=3)
RULES = "You play a talking game. Say one short sentence each turn. " * 3


def opening(match: int) -> list[dict]:
    return [
        {"role": "system", "content": RULES},
        {"role": "user", "content": f"Match {match % 2}. Say hello."},
    ]


@pytest.fixture(scope="module")
def model_tok():
    return sharpened_tiny(1)


def pair(model_tok, **cached_kwargs):
    """(the backend with the prefix cache, the same model's backend without it)."""
    return (
        TransformersBackend(model_tok, **{"prefix_cache_mb": 1024, **cached_kwargs}),
        TransformersBackend(model_tok, prefix_cache_mb=0),
    )


def same_generations(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.token_ids == w.token_ids
        assert g.prompt_token_ids == w.prompt_token_ids
        assert g.logprobs == pytest.approx(w.logprobs, abs=2e-4)
        for gt, wt in zip(g.top_logprobs, w.top_logprobs, strict=True):
            assert [t for t, _ in gt] == [t for t, _ in wt]
            assert [p for _, p in gt] == pytest.approx([p for _, p in wt], abs=2e-4)


def common(a: list[int], b: list[int]) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def play(cached, plain, matches: int, turns: int, branch_at: int | None = None) -> list[int]:
    """Multi-turn conversations played greedily on both backends in lockstep (each turn a
    batch of every conversation); match m's conversation branches in two at `branch_at`.
    Asserts every turn's generations agree; returns the prompt tokens the cache prefilled."""
    convs = [opening(m) for m in range(matches)]
    prefilled = []
    for turn in range(turns):
        if turn == branch_at:
            convs = [
                c for conv in convs for c in (conv, [*conv[:-1], {**conv[-1], "content": "Now?"}])
            ]
        before = cached.prefill_tokens
        got, want = cached.generate(convs, GREEDY), plain.generate(convs, GREEDY)
        same_generations(got, want)
        prefilled.append(cached.prefill_tokens - before)
        for c, g in zip(convs, got):
            c += [
                {"role": "assistant", "content": g.text},
                {"role": "user", "content": f"Turn {turn}."},
            ]
    return prefilled


def test_multi_turn_prompts_prefill_only_what_follows_their_cached_prefix(model_tok):
    cached, plain = pair(model_tok)
    convs = [opening(0)]
    seen: list[list[int]] = []  # what the cache was given: prompts, prompts + replies
    quoted = 0  # turns whose cached prefix reached into the last reply
    for _ in range(4):  # one conversation, one call a turn: each prompt extends the last
        before = cached.prefill_tokens
        (got,), (want,) = cached.generate(convs, GREEDY), plain.generate(convs, GREEDY)
        same_generations([got], [want])
        prompt = got.prompt_token_ids
        done = min(max((common(s, prompt) for s in seen), default=0), len(prompt) - 1)
        assert cached.prefill_tokens - before == len(prompt) - done
        quoted += bool(seen) and done > len(seen[-2])
        seen += [prompt, prompt + got.token_ids[:-1]]
        convs[0] += [
            {"role": "assistant", "content": got.text},
            {"role": "user", "content": "Go on."},
        ]
    assert done > 0.7 * len(prompt) and quoted > 0


def test_matches_that_share_openings_and_branch_give_the_same_greedy_replies(model_tok):
    cached, plain = pair(model_tok)
    prefilled = play(cached, plain, matches=4, turns=4, branch_at=2)
    assert sum(prefilled) < plain.prefill_tokens / 2
    # matches 0 and 2 (1 and 3) are the same conversation: a later call prefills one token each
    assert play(cached, plain, matches=2, turns=1) == [2]


def test_a_batch_mixing_hits_of_different_lengths_and_misses_gives_the_same_logits(model_tok):
    cached, plain = pair(model_tok)
    long = [
        *opening(0),
        {"role": "assistant", "content": "Hi there."},
        {"role": "user", "content": "More."},
    ]
    cached.generate([long], GREEDY)  # cached: the long conversation, and so the opening's prefix
    batch = [
        long,  # a whole hit (its last token prefilled)
        opening(0),  # a hit inside the long one
        [*long, {"role": "assistant", "content": "Ok."}, {"role": "user", "content": "End."}],
        [{"role": "user", "content": "Something else entirely, unrelated."}],  # a miss
    ]
    same_generations(cached.generate(batch, GREEDY), plain.generate(batch, GREEDY))
    moves = [["rock", "paper", "scissors"]] * len(batch)
    got, want = (
        cached.move_distributions(batch, moves, 1.0),
        plain.move_distributions(batch, moves, 1.0),
    )
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, abs=1e-5)


def test_a_small_byte_bound_evicts_and_stays_exact(model_tok):
    probe = TransformersBackend(model_tok, prefix_cache_mb=1024)
    probe.generate([opening(0)], GREEDY)
    one_prompt = probe.prefix_cache.nbytes  # the opening's keys and values
    cached, plain = pair(model_tok, prefix_cache_mb=1.5 * one_prompt / 2**20)
    held = []
    convs = [opening(m) for m in range(3)]
    for turn in range(3):
        got = cached.generate(convs, GREEDY)
        same_generations(got, plain.generate(convs, GREEDY))
        held.append(cached.prefix_cache.nbytes)
        for c in convs:
            c += [
                {"role": "assistant", "content": "Fine."},
                {"role": "user", "content": f"Turn {turn}."},
            ]
    assert 0 < max(held) <= cached.prefix_cache.max_bytes
    a, b = got[0].prompt_token_ids, got[1].prompt_token_ids  # the last turn's two distinct prompts
    per_token = one_prompt / len(probe.encode(opening(0)))
    assert per_token * (len(a) + len(b) - common(a, b)) > cached.prefix_cache.max_bytes


def test_a_weight_change_drops_the_cache(model_tok):
    model, tok = sharpened_tiny(2)
    cached, plain = pair((model, tok))
    convs = [opening(0), opening(1)]
    cached.generate(convs, GREEDY)
    with torch.no_grad():  # an in-place update, as an optimizer step
        for p in model.parameters():
            p.mul_(1.1)
    for _ in range(2):  # the second time after loading other weights into the module
        before = (cached.prefill_tokens, plain.prefill_tokens)
        same_generations(cached.generate(convs, GREEDY), plain.generate(convs, GREEDY))
        # prefilled as without a cache: the shared rules once, then each prompt's own part
        assert cached.prefill_tokens - before[0] == plain.prefill_tokens - before[1]
        model.load_state_dict({k: v * 0.9 for k, v in model.state_dict().items()})


def test_each_lora_adapter_keeps_its_own_prefixes(model_tok):
    from peft import LoraConfig, get_peft_model

    from agents.models import tiny_llama

    base, tok = tiny_llama(3)
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(base, lora, adapter_name="first")
    model.add_adapter("second", lora)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5 if ".first." in n else 0.1)
    seats = {"player_0": "first", "player_1": "second"}
    cached = TransformersBackend((model, tok), seat_adapters=seats, prefix_cache_mb=1024)
    plain = TransformersBackend((model, tok), seat_adapters=seats, prefix_cache_mb=0)
    convs, moves = [opening(0)] * 2, [["a", "b", "c"]] * 2
    for players in (["player_0", "player_0"], ["player_1", "player_0"], ["player_1", "player_1"]):
        got = cached.move_distributions(convs, moves, 1.0, players)
        want = plain.move_distributions(convs, moves, 1.0, players)
        for g, w in zip(got, want, strict=True):
            assert g == pytest.approx(w, abs=1e-5)
    first = cached.move_distributions(convs[:1], moves[:1], 1.0, ["player_0"])[0]
    assert got[0] != pytest.approx(first, abs=1e-3)  # the adapters differ


def test_prefix_cache_mb_must_be_a_number_at_least_zero(model_tok):
    with pytest.raises(ValueError, match="prefix_cache_mb must be a number >= 0, got -1"):
        TransformersBackend(model_tok, prefix_cache_mb=-1)
    assert TransformersBackend(model_tok, prefix_cache_mb=0).prefix_cache is None
    assert TransformersBackend(model_tok).prefix_cache is None  # off unless asked for
