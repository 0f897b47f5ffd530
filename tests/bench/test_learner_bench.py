"""bench/learner_throughput.py: the recipe's real prompts, and its shared-prefix path beside the
per-sequence one on the real tiny Llama."""

import importlib.util
from pathlib import Path

import pytest

from agents.models import load_tokenizer

BENCH = Path(__file__).resolve().parents[2] / "bench" / "learner_throughput.py"


def load():
    spec = importlib.util.spec_from_file_location("learner_throughput", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recipe_rows_are_the_prompts_the_recipes_agent_sends():
    bench = load()
    tok = load_tokenizer("smollm2-135m")
    rows = bench.recipe_rows("fresh", matches=6)  # one pair of seat orders per game
    assert {row[3] for row in rows} == {"tic_tac_toe", "kuhn_poker", "hanabi_mini"}
    names = {"tic_tac_toe": "Tic-tac-toe", "kuhn_poker": "Kuhn poker", "hanabi_mini": "Hanabi"}
    for prompt, completion, _, game, allowed in rows:
        assert allowed is None  # free text: the recipe does not constrain decoding
        text = tok.decode(prompt)
        assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
        assert f"GAME RULES:\n{names[game]}" in text and "LEGAL MOVES:" in text
        assert len(completion) == 12  # the recipe's max_new_tokens: replies cut there
        assert tok.decode(completion).startswith("[")
    conversations = bench.recipe_rows("multi_turn", matches=6)
    # the same matches; every later turn's prompt is an earlier turn's prompt and reply, then more
    assert len(conversations) == len(rows)
    firsts = [p for p, *_ in conversations if tok.decode(p).count("<|im_start|>user") == 1]
    for prompt, *_ in conversations:
        if prompt not in firsts:
            assert any(prompt[: len(p) + len(c)] == p + c for p, c, *_ in conversations)


@pytest.mark.slow
def test_recipe_shape_times_the_shared_prefix_beside_the_per_sequence_learner():
    out = load().main(
        ["--model", "tiny-llama", "--shape", "recipe", "--matches", "2", "--threads", "1"]
    )
    per, shared = out["per sequence"], out["shared prefix"]
    assert per["seconds_per_step"] > 0 and shared["seconds_per_step"] > 0
    assert out["shared_ratio"] > 0 and out["shared_cpu_ratio"] > 0
    assert per["computed_tokens"] == out["tokens"]  # every token of every sequence
    assert shared["computed_tokens"] < 0.8 * out["tokens"]  # the rules once
    assert out["mfu_computed"]["shared prefix"] < out["mfu"]["shared prefix"]
    assert out["mfu_computed"]["per sequence"] == out["mfu"]["per sequence"]
