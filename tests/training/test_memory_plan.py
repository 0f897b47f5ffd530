"""The memory plan (`training.memory_plan`, `arena train CONFIG --plan`): parameter counts
against real models and published counts, every row by hand, the activation model against
what autograd keeps, and the CLI's verdict on the shipped configs."""

import math
import re

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

from agents.models import model_config, smollm2_folder, tiny_llama
from cli.main import main as arena
from training.config import load_config
from training.learner_config import LearnerConfig
from training.loss import LossConfig
from training.memory_plan import (
    ACTIVATION_HEAD,
    GIB,
    MemoryPlan,
    Row,
    layer_activation_bytes,
    learner_rows,
    lora_parameter_count,
    micro_batch_shapes,
    parameter_count,
    render,
)
from training.sections import PolicyModel

TINY = 3_277_120  # tiny-llama (hidden 64, 2 layers, MLP 256, SmolLM2's 49152 tokens, tied head)


def test_tiny_llama_parameters_by_hand():
    embed = 49152 * 64
    layer = 4 * 64 * 64 + 3 * 64 * 256 + 2 * 64  # q, k, v, o; gate, up, down; two norms
    assert embed + 2 * layer + 64 == TINY  # and the final norm
    assert parameter_count(model_config("tiny-llama")) == TINY
    assert sum(p.numel() for p in tiny_llama(0)[0].parameters()) == TINY


def test_known_shapes_count_the_published_parameters():
    """Qwen3-0.6B has 596,049,920 parameters (its published count), 1.7B and 4B round to
    theirs; SmolLM2-135M's count is that of its converted weights file."""
    from safetensors import safe_open

    assert parameter_count(model_config("Qwen/Qwen3-0.6B")) == 596_049_920
    assert round(parameter_count(model_config("Qwen/Qwen3-1.7B")) / 1e7) == 172
    assert round(parameter_count(model_config("Qwen/Qwen3-4B")) / 1e7) == 402
    with safe_open(str(smollm2_folder() / "model.safetensors"), "pt") as f:
        stored = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    assert parameter_count(model_config("smollm2-135m")) == stored


@pytest.mark.parametrize("targets", ["all-linear", ["q_proj", "v_proj"]])
def test_lora_parameters_match_peft(targets):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        tiny_llama(0)[0], LoraConfig(r=8, target_modules=targets, task_type="CAUSAL_LM")
    )
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert lora_parameter_count(model_config("tiny-llama"), 8, targets) == trainable


def rows_by_name(rows):
    return {r.what: r for r in rows}


def test_learner_rows_by_hand():
    """bf16 full fine-tune with a KL term: a bf16 copy (2 bytes a weight), fp32 masters (4),
    a bf16 reference (2), AdamW's two fp32 moments (8), bf16 gradients in the backward (2),
    fp32 gradients for the optimizer (4)."""
    config = model_config("tiny-llama")
    learner = LearnerConfig(loss=LossConfig(kl_coef=0.1))
    rows = rows_by_name(learner_rows(config, learner, "bfloat16", [(100, 10, 50)]))
    expect = {
        "compute copy (bfloat16)": (2, "resident", "device"),
        "fp32 master weights": (4, "resident", "device"),
        "KL reference": (2, "resident", "device"),
        "AdamW state (fp32 m, v)": (8, "resident", "device"),
        "gradients (bfloat16)": (2, "backward", "device"),
        "gradients (fp32)": (4, "optimizer", "device"),
    }
    for what, (per_weight, phase, where) in expect.items():
        assert (rows[what].bytes, rows[what].phase, rows[what].where) == (
            per_weight * TINY,
            phase,
            where,
        )
    offloaded = rows_by_name(
        learner_rows(config, LearnerConfig(offload_optimizer=True), "bfloat16", [(100, 10, 50)])
    )
    for what in ("fp32 master weights", "AdamW state (fp32 m, v)", "gradients (fp32)"):
        assert offloaded[what].where == "host"
    assert "KL reference" not in offloaded  # no KL term by default
    fp32 = rows_by_name(learner_rows(config, LearnerConfig(), "float32", [(100, 10, 50)]))
    assert "compute copy (float32)" not in fp32  # fp32 trains the weights in place
    assert fp32["gradients (fp32)"].phase == "backward"


def test_lora_rows_train_the_adapters_against_the_base():
    config = model_config("tiny-llama")
    adapters = lora_parameter_count(config, 8)
    learner = LearnerConfig(lora_rank=8, loss=LossConfig(kl_coef=0.1))
    rows = rows_by_name(learner_rows(config, learner, "bfloat16", [(100, 10, 50)]))
    assert rows["KL reference"].bytes == 0  # the base with the adapters off
    assert rows["AdamW state (fp32 m, v)"].bytes == 8 * adapters
    assert rows["compute copy (bfloat16)"].bytes == 2 * (TINY + adapters)


def test_peak_is_resident_plus_the_largest_phase():
    plan = MemoryPlan(
        [
            Row("weights", 10 * GIB),
            Row("engine", 30 * GIB),
            Row("activations", 20 * GIB, phase="backward"),
            Row("gradients (fp32)", 25 * GIB, phase="optimizer"),
            Row("kv", 5 * GIB, phase="rollout"),
            Row("state", 99 * GIB, where="host"),
        ],
        80 * GIB,
        "a card",
    )
    assert plan.peak == 65 * GIB and plan.fits and plan.host == 99 * GIB
    assert render(plan).splitlines()[-1] == "peak 65.0 GiB of 80 GiB: fits"
    plan.device_bytes = 64 * GIB
    assert render(plan).splitlines()[-1] == "peak 65.0 GiB of 64 GiB: does not fit"


def test_micro_batch_shapes_by_hand(tmp_path):
    cfg = load_config("configs/train_tictactoe_tiny.yaml")  # 8192 tokens, 4-token replies
    assert micro_batch_shapes(PolicyModel.of(cfg)) == [(8192, math.ceil(8192 * 4 / 68), 8192)]
    big = load_config(
        "configs/train_mars_qwen3_4b.yaml", {"learner": {"micro_batch_tokens": 4096}}
    )  # 4096-token replies; vLLM rows up to max_model_len 16384, alone in their micro-batch
    assert micro_batch_shapes(PolicyModel.of(big)) == [(4096, 4033, 4096), (16384, 4096, 16384)]


def saved_per_token(config, rows=4, width=96) -> tuple[float, float]:
    """(bytes autograd keeps per token and decoder layer, per LM-head position and vocabulary
    entry) for a bf16 forward with sdpa attention and a padding mask, and the learner's fp32
    log-softmax over the logits: by saved-tensor hooks, one layer against two, and 8 positions
    with logits against 16."""

    def kept(layers: int, positions: int) -> int:
        c = config.__class__(
            **{**config.to_dict(), "num_hidden_layers": layers, "layer_types": None}
        )
        c._attn_implementation = "sdpa"
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(c, dtype=torch.bfloat16).train()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        seen = {}

        def pack(t):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        mask = torch.ones(rows, width, dtype=torch.long)
        mask[0, :5] = 0  # padding: the masked attention path the learner takes
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = model(
                input_ids=torch.randint(0, 1000, (rows, width)),
                attention_mask=mask,
                logits_to_keep=torch.arange(width - positions, width),
                use_cache=False,
            )
            torch.logsumexp(out.logits.float() / 0.7, -1)
        return sum(n for ptr, n in seen.items() if ptr not in params)

    per_layer = (kept(2, 8) - kept(1, 8)) / (rows * width)
    head = (kept(1, 16) - kept(1, 8)) / (rows * 8 * config.vocab_size)
    return per_layer, head


@pytest.mark.parametrize(
    "config",
    [
        LlamaConfig(
            vocab_size=4096,
            hidden_size=192,
            intermediate_size=512,
            num_attention_heads=6,
            num_key_value_heads=2,
        ),
        Qwen3Config(
            vocab_size=4096,
            hidden_size=128,
            intermediate_size=384,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
        ),
    ],
    ids=["llama", "qwen3"],
)
def test_activation_model_is_what_autograd_keeps(config):
    """The per-layer bytes the plan counts are those transformers' layers save for the
    backward (within 3%); what the LM head keeps per position is below the peak the plan counts."""
    per_layer, head = saved_per_token(config)
    assert layer_activation_bytes(config, 2) == pytest.approx(per_layer, rel=0.03)
    assert head < ACTIVATION_HEAD


def plan_lines(capsys, *args) -> list[str]:
    assert arena(["train", *args, "--plan"]) == 0
    return capsys.readouterr().out.strip().splitlines()


def test_paper_scale_config_fits_an_80_gib_card_beside_its_engine(capsys):
    lines = plan_lines(capsys, "configs/train_mars_qwen3_4b.yaml", "--device-memory", "80")
    assert re.fullmatch(r"peak \d+\.\d GiB of 80 GiB: fits", lines[-1])
    assert any(line.startswith("vLLM engine") for line in lines)


def test_paper_scale_config_with_resident_optimizer_does_not_fit(capsys):
    lines = plan_lines(
        capsys,
        "configs/train_mars_qwen3_4b.yaml",
        "--device-memory",
        "80",
        "--set",
        "learner.offload_optimizer=false",
        "--set",
        "learner.gradient_checkpointing=false",
    )
    assert lines[-1].endswith("GiB of 80 GiB: does not fit")


def test_plan_errors_are_one_line(capsys):
    assert arena(["train", "configs/train_tictactoe_tiny.yaml", "--device-memory", "80"]) == 2
    assert "add --plan" in capsys.readouterr().err
    assert (
        arena(["train", "configs/train_tictactoe_tiny.yaml", "--plan", "--device-memory", "-1"])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device-memory" in err
