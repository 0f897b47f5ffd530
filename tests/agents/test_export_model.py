"""`arena export model`: a training checkpoint as a Hugging Face folder that plain transformers
loads, with the trained policy's logits, its tokenizer and chat template, and a model card."""

import json
import subprocess
import sys
from dataclasses import asdict

import pytest
import torch
import yaml
from safetensors import safe_open

from agents import checkpoint
from agents.hf_export import export_model
from agents.models import load_tokenizer, tiny_llama, tiny_llama_args
from cli.main import main
from training.league import League
from training.learner import Learner
from training.learner_config import LearnerConfig
from training.sequences import TrainingSequence

TEXT = "X to move. Board: X.O|...|..O. LEGAL MOVES: [1], [3], [4]"
MESSAGES = [{"role": "system", "content": "You play."}, {"role": "user", "content": "Your move?"}]
AGENT = {"prompt": "compact", "constrained": True}

# Runs in a fresh interpreter: only transformers, no module of this project.
PLAIN_LOAD = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
out, text = sys.argv[1], sys.argv[2]
tok = AutoTokenizer.from_pretrained(out)
model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
with torch.no_grad():
    logits = model(input_ids=ids).logits
torch.save(logits, out + ".logits.pt")
ours = {"agents", "arena", "core", "games", "training", "tournaments", "evaluation", "cli", "server"}
print(json.dumps({
    "chat": tok.apply_chat_template(json.loads(sys.argv[3]), add_generation_prompt=True, tokenize=False),
    "eos": model.generation_config.eos_token_id,
    "project_modules": sorted(m for m in sys.modules if m.split(".")[0] in ours),
}))
"""


@pytest.fixture(scope="module")
def tok():
    return tiny_llama(0)[1]


def trained(tmp_path, tok, cfg: LearnerConfig, step: int = 3, model: str = "tiny-llama"):
    """A tiny Llama (`model`: its name) after one PPO step, checkpointed at `step` in a run folder."""
    torch.manual_seed(0)
    learner = Learner(tiny_llama(**tiny_llama_args(model))[0], tok, cfg)
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]
    learner.step(
        [
            TrainingSequence(enc("X to move."), enc(" 4"), 1.0),
            TrainingSequence(enc("O to move."), enc(" 0 is best"), -1.0),
        ]
    )
    run = tmp_path / "run"
    config = {
        "model": model,
        "games": [{"name": "tic_tac_toe", "params": {"board": "relative"}}],
        "learner": asdict(cfg),
        "agent": AGENT,
    }
    checkpoint.save(
        run / "checkpoints",
        learner,
        step,
        config=config,
        league=League().state_dict(),
        state={"advantage": {}, "elapsed": 1.0, "games": 2},
    )
    return run, learner, config


def logits_of(model, tok) -> torch.Tensor:
    ids = tok(TEXT, return_tensors="pt", add_special_tokens=False)["input_ids"]
    model.eval()
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def test_plain_transformers_loads_the_export_with_the_trained_logits(tmp_path, tok):
    run, learner, _ = trained(tmp_path, tok, LearnerConfig(lr=1e-2))
    out = tmp_path / "hf"
    assert main(["export", "model", str(run), str(out)]) == 0
    proc = subprocess.run(
        [sys.executable, "-c", PLAIN_LOAD, str(out), TEXT, json.dumps(MESSAGES)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["project_modules"] == []
    exported = torch.load(f"{out}.logits.pt")
    want = logits_of(learner.model, tok)
    torch.testing.assert_close(exported, want, atol=1e-5, rtol=1e-5)
    untrained = logits_of(tiny_llama(0)[0], tok)
    assert (want - untrained).abs().max() > 1e-3  # the step moved the logits
    assert got["chat"] == load_tokenizer("tiny-llama").apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=False
    )
    assert got["eos"] == tok.eos_token_id
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "README.md"} <= names
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= names


def test_a_lora_checkpoint_exports_merged_with_the_adapters_logits(tmp_path, tok):
    from transformers import AutoModelForCausalLM

    run, learner, _ = trained(tmp_path, tok, LearnerConfig(lr=1e-2, lora_rank=4))
    done = export_model(run / "checkpoints", tmp_path / "hf")
    assert done.lora_merged and done.step == 3 and done.dtype == "float32"
    with safe_open(str(tmp_path / "hf" / "model.safetensors"), "pt") as f:
        assert not any("lora" in k for k in f.keys())
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32)
    unmerged = logits_of(learner.model, tok)  # base + adapters, as the learner computes them
    torch.testing.assert_close(logits_of(model, tok), unmerged, atol=1e-5, rtol=1e-5)
    assert (unmerged - logits_of(tiny_llama(0)[0], tok)).abs().max() > 1e-4


def test_the_dtype_asked_is_the_weights_dtype(tmp_path, tok):
    from transformers import AutoModelForCausalLM

    run, learner, _ = trained(tmp_path, tok, LearnerConfig(lr=1e-2))
    export_model(run, tmp_path / "bf16", dtype="bfloat16")
    with safe_open(str(tmp_path / "bf16" / "model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "bf16")
    assert model.dtype == torch.bfloat16
    rounded = learner.model.to(torch.bfloat16)  # the trained weights rounded to bf16
    torch.testing.assert_close(  # a few bf16 ulps: the load builds its own rotary tables
        logits_of(model, tok), logits_of(rounded, tok), atol=2e-2, rtol=2e-2
    )


def test_the_model_card_has_the_base_model_the_config_and_the_last_evaluation(tmp_path, tok):
    run, _, config = trained(tmp_path, tok, LearnerConfig(lr=1e-2, lora_rank=4), step=20)
    row = {
        "split": "train",
        "game": "tic_tac_toe",
        "opponent": "random",
        "games": 40,
        "wins": 30,
        "draws": 4,
        "losses": 6,
        "non_losing": 0.85,
        "ci_low": 0.71,
        "ci_high": 0.93,
        "mean_return": 0.6,
        "invalid_rate": 0.025,
    }
    gap = {"split": "train", "kind": "exploitability", "game": "kuhn_poker", "states": 12}
    gap |= {"exploitability": 0.1871, "nash_conv": 0.3742, "method": "exact"}
    with open(run / "eval.jsonl", "w") as f:
        for step, wins in ((10, 3), (20, 30), (30, 99)):  # step 30 is after the checkpoint
            f.write(json.dumps({**row, "step": step, "wins": wins}) + "\n")
            f.write(json.dumps({**gap, "step": step}) + "\n")
    export_model(run, tmp_path / "hf")
    card = (tmp_path / "hf" / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["library_name"] == "transformers" and "base_model" not in front  # random init
    assert "- Base model: `tiny-llama`" in card
    assert "training step 20" in card and "LoRA rank 4, merged into the weights" in card
    assert "## Evaluation (step 20)" in card
    assert (
        "| tic_tac_toe | train | random | 40 | 30-4-6 | 0.850 [0.710, 0.930] | +0.600 | 0.025 |"
        in card
    )
    assert "| kuhn_poker | 0.1871 | 0.3742 | 12 | exact |" in card  # not a match row
    assert "| kuhn_poker | train |" not in card
    assert "`prompt=compact`, `constrained=True`" in card
    yaml_block = card.split("## Training config\n\n```yaml\n")[1].split("```")[0]
    assert yaml.safe_load(yaml_block) == json.loads(json.dumps(config))  # as meta.json stores it


def test_a_run_exports_its_best_policy(tmp_path, tok):
    run, learner, config = trained(tmp_path, tok, LearnerConfig(lr=1e-2))
    rows = [{"step": 2, "split": "held_out", "game": "connect_four", "opponent": "random"}]
    checkpoint.save_policy(run / "best", learner, 2, config=config, eval=rows)
    done = export_model(run, tmp_path / "hf")
    assert done.checkpoint == run / "best" and done.step == 2
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "## Evaluation (step 2)" in card and "| connect_four | held_out | random |" in card


def test_bad_input_is_one_line(tmp_path, tok, capsys):
    def error(argv):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err
        return err

    assert error(["export", "model", str(tmp_path / "nope"), str(tmp_path / "x")]).endswith(
        f"no training checkpoint at {tmp_path / 'nope'} (no such folder)"
    )
    (tmp_path / "empty").mkdir()
    assert "no training checkpoint at" in error(
        ["export", "model", str(tmp_path / "empty"), str(tmp_path / "x")]
    )
    run, _, _ = trained(tmp_path, tok, LearnerConfig(lr=1e-2))
    (tmp_path / "taken").mkdir()
    assert "taken exists (add --overwrite" in error(
        ["export", "model", str(run), str(tmp_path / "taken")]
    )
    assert main(["export", "model", str(run), str(tmp_path / "taken"), "--overwrite"]) == 0
    assert (tmp_path / "taken" / "config.json").is_file()


@pytest.mark.vllm
def test_vllm_serves_the_export_with_the_trained_greedy_reply(tmp_path, tok):
    """vLLM loads the folder as it is: the chat template renders the same prompt, and greedy
    decoding gives what transformers gives from it, with the same logprobs."""
    pytest.importorskip("vllm")
    from transformers import AutoModelForCausalLM

    from agents.backend import SamplingParams
    from agents.vllm_backend import VLLMBackend

    # head size 32: vLLM's CPU attention has no kernel for the default tiny-llama's 16
    run, _, _ = trained(tmp_path, tok, LearnerConfig(lr=1e-2), model="tiny-llama:heads=2")
    out = tmp_path / "hf"
    export_model(run, out)
    backend = VLLMBackend(str(out), max_model_len=512, seed=0)
    try:
        (g,) = backend.generate([MESSAGES], SamplingParams(max_new_tokens=8, temperature=0.0))
    finally:
        backend.close()
    prompt = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=False)
    assert g.prompt_token_ids == list(prompt)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ids = torch.tensor([prompt + g.token_ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1 : -1], -1)
    assert g.token_ids == logprobs.argmax(-1).tolist()  # greedy: each token the most likely
    want = logprobs.gather(1, torch.tensor(g.token_ids)[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(g.logprobs), want, atol=1e-4, rtol=1e-4)
