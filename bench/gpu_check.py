"""The GPU check: one script that measures what the platform does on one CUDA card.

    python bench/gpu_check.py --write-tokenizer .gpu          # once, on a CPU: SmolLM2's tokenizer, no weights
    SELFPLAY_ARENA_CACHE=.gpu python bench/gpu_check.py --out gpu_check.json   # on the GPU machine
    python bench/gpu_check.py --dry-run                       # on a CPU: every part at tiny shapes, < 1 minute

One table (and `--out FILE.json`), in five parts:

1. ceiling: the card's bf16 and fp32 matmul rate (8192^3 products; fp32 without TF32);
2. rollout: random-initialised models at the shapes of SmolLM2-135M, Qwen3-1.7B and Qwen3-4B
   (configs built in code, `agents.models.KNOWN_SHAPES`; SmolLM2's tokenizer), bf16, through the
   transformers backend: tic-tac-toe matches of the model against itself, 1 / 16 / 64 live at
   once, free-text replies of 32 tokens (a random model never stops early); tokens/s and MFU;
3. learner: one PPO step per shape and learner setting (bf16 compute, fp32 masters, the KL
   reference of `loss.kl_coef 0.2`, 16 sequences with the recipe's prompt lengths, as
   bench/learner_throughput.py --shape recipe), each setting in turn (`SETTINGS`): resident
   (the default) and `offload_optimizer` + `gradient_checkpointing` (the paper-scale
   config's), each with one row per sequence and with `shared_prefix`; tokens/s, MFU, and the
   peak memory
   (`torch.cuda.max_memory_allocated` over the timed steps) beside the memory plan's
   prediction (`training.memory_plan.learner_rows` on the micro-batches the step formed). A
   setting the plan puts over the card is skipped, and says so;
4. selfplay: configs/train_tictactoe_tiny.yaml for 50 steps on the card (evaluation off, the
   config as shipped: precision auto), seed 0, and the same on the machine's CPU for seeds
   0-7 (`--cpu-seeds`), one process each, started with the card's run (after the timed parts,
   which they would slow).
   The curve is the non-losing rate against the random bot in each step's training matches;
   in windows of 10 steps the card's must lie within the CPU runs' lowest and highest,
   widened by two binomial standard errors of the window's matches (its own sampling noise);
5. paper config: configs/train_mars_qwen3_4b.yaml's learner, one real step on a card held to
   `--card-gib` (80: `torch.cuda.set_per_process_memory_fraction` on a larger card) with the
   vLLM engine's share (`gpu_memory_utilization` of the card) held by a tensor: a batch of one
   longest sequence (max_model_len: a full reply after the rest as prompt) and two full
   replies, the plan's worst micro-batches; its measured peak beside the plan's.

Dry run (`--dry-run`, on the CPU): the same parts at tiny shapes (two layers of width 64 over
the tokenizer's vocabulary), one self-play step of 4 matches; memory is measured by the
profiler's allocation events (the peak of the CPU allocator's running total over the step,
plus the learner's tensors before it). The default tests run it, so the script cannot rot.

A part that fails is a row with its error (the traceback on stderr) and the next part runs;
`--out` is rewritten after every part, so a run cut short keeps what it measured;
`--deadline-minutes M` skips the parts not begun M minutes after the start (a row says so).

What the GPU machine needs beside the source tree: the tokenizer folder (`--write-tokenizer`,
3.5 MB) and the wheels of open_spiel, pettingzoo, gymnasium, farama-notifications, openskill
and ml-collections (docs/guides/gpu.md). Written for such an image's torch 2.11 and
transformers 5.17: the dry run passes on transformers 5.17 (with torch 2.13 on a CPU).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the source tree, run as a script
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other bench scripts it reuses

import numpy as np  # noqa: E402
import torch  # noqa: E402
from machine_limit import cpu_flags, utilisation  # noqa: E402
from rollout_throughput import CountingBackend, run_arena  # noqa: E402

from agents.models import (  # noqa: E402
    SMOLLM2,
    SMOLLM2_SPECIAL,
    SMOLLM2_VOCAB,
    load_tokenizer,
    model_config,
    smollm2_folder,
)
from agents.transformers_backend import TransformersBackend  # noqa: E402
from core.machine import matmul_flops  # noqa: E402
from core.records import read_json_lines  # noqa: E402
from training.config import load_config  # noqa: E402
from training.learner import Learner  # noqa: E402
from training.learner_config import LearnerConfig  # noqa: E402
from training.loss import LossConfig  # noqa: E402
from training.memory_plan import (  # noqa: E402
    CUDA_RUNTIME,
    GIB,
    MIN_PROMPT,
    MemoryPlan,
    learner_rows,
    plan_config,
)
from training.sections import PolicyModel  # noqa: E402
from training.sequences import TrainingSequence  # noqa: E402

SHAPES = {"SmolLM2-135M": SMOLLM2, "Qwen3-1.7B": "Qwen/Qwen3-1.7B", "Qwen3-4B": "Qwen/Qwen3-4B"}
BATCHES = (1, 16, 64)  # live matches in the rollout part
DRY_BATCHES = (1, 2, 4)
TTT_CONFIG = ROOT / "configs" / "train_tictactoe_tiny.yaml"
PAPER_CONFIG = ROOT / "configs" / "train_mars_qwen3_4b.yaml"
STEPS = 50  # self-play steps of the self-play part
WINDOW = 10  # steps per window of the self-play curve
# Prompt lengths (SmolLM2 chat template, the rules in every prompt) of configs/train_mars_smollm2.yaml's
# policy turns: the 17 quantiles 0, 1/16, .., 1 of 980 turns from 16 steps of its matches played with
# random legal replies (tic-tac-toe and Kuhn poker ~270-360 tokens, hanabi_mini ~720-850).
RECIPE_PROMPTS = [
    270,
    279,
    282,
    286,
    289,
    293,
    296,
    341,
    356,
    359,
    723,
    748,
    762,
    774,
    785,
    804,
    850,
]
RECIPE_RULES = (250, 700)  # tokens every prompt of a short (< 400 tokens) or long game shares
RECIPE_KL = (
    0.2  # the recipe's learner: k3 KL to a frozen reference (one more forward a micro-batch)
)


def recipe_batch(n: int, completion_len: int, vocab: int, seed: int = 0):
    """`n` sequences whose prompts sit at the quantiles (i + 0.5) / n of RECIPE_PROMPTS (the
    recipe's mix of short and long prompts, in proportion), random token ids after a rules
    block the short prompts share and one the long prompts share (`RECIPE_RULES`, cut to the
    prompt's length), with `completion_len`-token replies."""
    rng = np.random.default_rng(seed)
    grid = np.linspace(0, 1, len(RECIPE_PROMPTS))
    lengths = [int(np.interp((i + 0.5) / n, grid, RECIPE_PROMPTS)) for i in range(n)]
    rules = [rng.integers(100, vocab - 1, r).tolist() for r in RECIPE_RULES]
    rows = []
    for p in lengths:
        shared = rules[0] if p < 400 else rules[1]
        own = rng.integers(100, vocab - 1, max(0, p - len(shared))).tolist()
        completion = rng.integers(100, vocab - 1, completion_len).tolist()
        rows.append(((shared + own)[:p], completion, float(rng.normal())))
    return rows


LEAN = {"offload_optimizer": True, "gradient_checkpointing": True}
SETTINGS = {  # learner settings of the learner part: LearnerConfig options
    "resident": {"shared_prefix": False},
    "resident + shared prefix": {"shared_prefix": True},
    "offload + checkpointing": {**LEAN, "shared_prefix": False},
    "offload + checkpointing + shared prefix": {**LEAN, "shared_prefix": True},
}


# --- the device's memory ----------------------------------------------------------------------


def tensor_bytes(*objects) -> int:
    """Bytes of the distinct storages of modules' parameters, buffers and gradients and of an
    optimizer's state (the learner's tensors before a step)."""
    seen: dict[int, int] = {}

    def add(t):
        if torch.is_tensor(t) and t.device.type == "cpu":
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()

    for obj in objects:
        if isinstance(obj, torch.nn.Module):
            for t in [*obj.parameters(), *obj.buffers()]:
                add(t)
                add(t.grad)
        elif isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                for t in state.values():
                    add(t)
    return sum(seen.values())


def measure_peak(device: str, fn, *holders) -> float:
    """Peak bytes allocated on `device` while `fn()` runs. CUDA: `max_memory_allocated`. CPU:
    the tensors `holders` hold before, plus the peak of the allocator's running total over
    `fn` from the profiler's allocation events (tensors freed in `fn` that existed before it
    are not seen leaving: drop gradients first)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
    from torch._C._profiler import _EventType  # start-up time: the profiler, CPU runs only
    from torch.profiler import ProfilerActivity, profile  # start-up time: as above

    before = tensor_bytes(*holders)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    peak, stack = 0, list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.typed[0] == _EventType.Allocation:
            peak = max(peak, node.typed[1].total_allocated)
        stack.extend(node.children)
    return before + peak


def holders(learner) -> list:
    """What holds a learner's tensors: its modules and its optimizer."""
    modules = (learner.model, learner.policy, learner.ref_model, learner.value_head)
    return [m for m in modules if m is not None] + [learner.optimizer]


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def out_of_memory(e: BaseException) -> bool:
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


# --- models -----------------------------------------------------------------------------------


def shrink(config):
    """`config` at a dry run's size: two layers of width 64 over the tokenizer's vocabulary,
    its own kind of layer (Llama, Qwen3)."""
    return config.__class__(
        **{
            **config.to_dict(),
            "vocab_size": SMOLLM2_VOCAB,
            **SMOLLM2_SPECIAL,
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "layer_types": None,
        }
    )


def build(config, device: str, dtype, tokenizer):
    """A randomly initialised model of `config`, built on `device` in `dtype`."""
    from transformers import AutoModelForCausalLM  # start-up time: transformers

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


# --- the parts --------------------------------------------------------------------------------


def ceiling(device: str, dry: bool) -> dict[str, float]:
    size, seconds = (256, 0.2) if dry else (8192, 2.0)
    return {dt: matmul_flops(dt, size, seconds, device=device) for dt in ("bfloat16", "float32")}


def rollouts(name: str, config, tok, device: str, dry: bool, peak_flops: float) -> list[dict]:
    """Tokens/s and MFU of self-play tic-tac-toe through the transformers backend, bf16."""
    model = build(config, device, torch.bfloat16, tok)
    backend = CountingBackend(TransformersBackend((model, tok), max_batch_size=64))
    new_tokens = 4 if dry else 32
    run_arena(backend, 2, 2, 2)  # warm-up: kernels, allocator
    rows = []
    for live in DRY_BATCHES if dry else BATCHES:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        r = run_arena(backend, live, live, new_tokens)
        context = round((r["prompt_tokens"] + r["tokens"] / 2) / max(1, r["turns"]))
        mfu = utilisation(
            config, r["prompt_tokens"], r["tokens"], r["seconds"], context, peak_flops
        )
        rows.append(
            {
                "part": "rollout",
                "shape": name,
                "setting": f"{live} live",
                "tokens_per_s": r["tokens"] / r["seconds"],
                "mfu": mfu,
                "note": f"{r['tokens']} tokens, {r['turns']} turns, {r['seconds']:.1f} s",
            }
        )
    del model, backend
    free_memory()
    return rows


def learner_step(
    name: str,
    config,
    tok,
    device: str,
    setting: str,
    dry: bool,
    peak_flops: float,
    card_bytes: float,
) -> dict:
    """One setting's learner steps on one shape: tokens/s, MFU, measured and planned peak."""
    options = SETTINGS[setting]
    micro = 1024 if dry else 4096
    cfg = LearnerConfig(
        lr=1e-6,
        precision="bfloat16",
        micro_batch_tokens=micro,
        temperature=0.6,
        loss=LossConfig(kl_coef=RECIPE_KL),
        **options,
    )
    rows = (
        recipe_batch(4, 12, config.vocab_size)
        if dry
        else recipe_batch(16, 12, min(config.vocab_size, len(tok)))
    )
    if dry:  # short prompts: a dry run's seconds
        rows = [(p[:60], c, a) for p, c, a in rows]
    seqs = [TrainingSequence(p, c, a) for p, c, a in rows]
    base = {"part": "learner", "shape": name, "setting": setting}
    # the plan, on the micro-batches this step forms (one learner of the shape's widths, no weights)
    probe = Learner(
        build(shrink(config), "cpu", torch.float32, tok),
        tok,
        LearnerConfig(precision="float32", micro_batch_tokens=micro, shared_prefix=False),
    )
    shapes = [
        (mb.input_ids.numel(), mb.targets.numel(), mb.input_ids.shape[1])
        for mb in probe._micro_batches(seqs)
    ]
    # on a CPU the host is the device: what an offloaded learner keeps there counts too
    planned = cfg if device.startswith("cuda") else replace(cfg, offload_optimizer=False)
    plan = MemoryPlan(learner_rows(config, planned, "bfloat16", shapes), card_bytes, device)
    predicted = plan.learner_peak
    base["predicted_gib"] = predicted / GIB
    if device.startswith("cuda") and predicted > 0.95 * card_bytes:
        return {**base, "note": f"skipped: the plan puts it at {predicted / GIB:.1f} GiB"}
    learner = None
    try:
        masters = "cpu" if options.get("offload_optimizer") else device
        learner = Learner(build(config, masters, torch.float32, tok), tok, cfg, device=device)
        learner.step(seqs)  # the optimizer state, the kernels
        learner.optimizer.zero_grad(set_to_none=True)  # gone before the measured steps
        steps = 1 if dry else 2

        def run():
            for _ in range(steps):
                learner.step(seqs)

        start = time.perf_counter()
        peak = measure_peak(device, run, *holders(learner))
        seconds = (time.perf_counter() - start) / steps
    except RuntimeError as e:
        if not out_of_memory(e):
            raise
        return {**base, "note": f"out of memory (the plan: {predicted / GIB:.1f} GiB)"}
    finally:
        learner = None
        free_memory()
    prompt = sum(len(s.prompt_ids) for s in seqs)
    completion = sum(len(s.completion_ids) for s in seqs)
    context = round((prompt + completion) / len(seqs) / 2)
    mfu = utilisation(config, prompt, completion, seconds, context, peak_flops, passes=4)
    return {
        **base,
        "tokens_per_s": (prompt + completion) / seconds,
        "mfu": mfu,
        "peak_gib": peak / GIB,
        "plan_ratio": predicted / peak,
        "note": f"{len(seqs)} sequences, {prompt + completion} tokens, micro-batches {[s[0] for s in shapes]}",
    }


def selfplay_run(device: str, steps: int, seed: int, folder: Path, dry: bool) -> list[float]:
    """configs/train_tictactoe_tiny.yaml for `steps` steps (evaluation off): the non-losing
    rate against the random bot of every step's training matches."""
    from rich.console import Console  # start-up time: rich

    from training.selfplay import train  # start-up time: the training loop

    overrides = {
        "steps": steps,
        "seed": seed,
        "device": device,
        "run_dir": str(folder),
        "max_minutes": 0,
        "checkpoint_every": 0,
        "eval": {"every": 0},
    }
    if dry:
        overrides.update(matches_per_step=4, concurrency=4)
    train(load_config(TTT_CONFIG, overrides), console=Console(quiet=True))
    metrics = read_json_lines(folder / "metrics.jsonl")
    return [m.get("win_rate", 0.0) + m.get("draw_rate", 0.0) for m in metrics]


def start_cpu_runs(seeds: list[int], steps: int, dry: bool, folder: Path) -> list:
    """The CPU runs of the self-play part, one process a seed (1 thread each), started at once
    beside the card's run; each writes its curve to `folder`/seed_N.json."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    procs = []
    for seed in seeds:
        cmd = [sys.executable, __file__, "--_cpu_run", str(seed), "--_steps", str(steps)]
        cmd += ["--_folder", str(folder)] + (["--dry-run"] if dry else [])
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
        )
    return procs


def cpu_run(seed: int, steps: int, folder: Path, dry: bool) -> None:
    """One CPU run of the self-play part (a subprocess of `start_cpu_runs`)."""
    curve = selfplay_run("cpu", steps, seed, folder / f"run_{seed}", dry)
    (folder / f"seed_{seed}.json").write_text(json.dumps(curve))


def windows(curve: list[float]) -> list[float]:
    return [float(np.mean(curve[i : i + WINDOW])) for i in range(0, len(curve), WINDOW)]


def selfplay(
    device: str,
    dry: bool,
    procs: list,
    folder: Path,
    steps: int = STEPS,
    seed: int = 0,
    wait_s: float | None = None,
) -> dict:
    """The card's run beside the CPU runs' spread: per window of `WINDOW` steps, the card's mean
    non-losing rate within the CPU seeds' lowest and highest, widened by two binomial standard
    errors of the window's matches against random (its own sampling noise). The CPU runs get
    `wait_s` seconds after the card's run (default: no limit); one still running then is
    stopped and left out."""
    start, threads = time.perf_counter(), torch.get_num_threads()
    curve = selfplay_run(device, steps, seed, folder / "device_run", dry)
    torch.set_num_threads(threads)  # the run set the config's own (1)
    seconds = time.perf_counter() - start
    cpu, until = {}, None if wait_s is None else time.perf_counter() + wait_s
    for proc in procs:
        try:
            left = None if until is None else max(1.0, until - time.perf_counter())
            _, err = proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            continue
        if proc.returncode != 0:
            raise RuntimeError(f"a CPU self-play run failed: {err.strip().splitlines()[-1]}")
    for f in sorted(folder.glob("seed_*.json")):
        cpu[f.stem.removeprefix("seed_")] = json.loads(f.read_text())
    if not cpu:
        raise RuntimeError(f"no CPU self-play run finished within {wait_s:.0f} s of the card's")
    cfg = load_config(TTT_CONFIG)
    against = cfg.matches_per_step * (1 - cfg.league.self_play)  # matches against random a step
    mine, spread = windows(curve), [windows(c) for c in cpu.values()]
    low = [min(w[i] for w in spread) for i in range(len(mine))]
    high = [max(w[i] for w in spread) for i in range(len(mine))]
    margin = [
        2 * math.sqrt(max(m * (1 - m), 0.01) / (against * min(WINDOW, steps - i * WINDOW)))
        for i, m in enumerate(mine)
    ]
    outside = [i for i, m in enumerate(mine) if not low[i] - margin[i] <= m <= high[i] + margin[i]]
    verdict = "within the CPU seeds' spread" if not outside else f"OUTSIDE in windows {outside}"
    return {
        "part": "selfplay",
        "shape": "tiny-llama:hidden=128:heads=8",
        "setting": f"{steps} steps, seed {seed} vs CPU seeds {','.join(cpu)}",
        "curve": curve,
        "cpu_curves": cpu,
        "windows": mine,
        "cpu_low": low,
        "cpu_high": high,
        "margin": margin,
        "within": not outside,
        "seconds": seconds,
        "note": f"non-losing vs random per {WINDOW} steps {[round(m, 3) for m in mine]}; CPU "
        f"{[f'{a:.3f}-{b:.3f}' for a, b in zip(low, high)]} +- {[round(m, 3) for m in margin]}: "
        f"{verdict}",
    }


def paper_config(tok, device: str, dry: bool, card_gib: float) -> dict:
    """One learner step of configs/train_mars_qwen3_4b.yaml beside the engine's share, on a card
    held to `card_gib`, at the plan's worst micro-batches."""
    cfg = load_config(PAPER_CONFIG, {"device": device})
    config = model_config(cfg.model)
    share = float(cfg.backend_kwargs.get("gpu_memory_utilization", 0.9))
    row = {"part": "paper config", "shape": "Qwen3-4B", "setting": PAPER_CONFIG.name}
    longest = int(cfg.backend_kwargs.get("max_model_len", cfg.learner.micro_batch_tokens))
    new = cfg.agent.max_new_tokens
    if dry:
        config, longest, new = shrink(config), 96, 32
        cfg.learner.micro_batch_tokens = 64
    vocab = min(config.vocab_size, len(tok))
    g = np.random.default_rng(0)
    seqs = [
        TrainingSequence(
            g.integers(100, vocab, p).tolist(), g.integers(100, vocab, new).tolist(), a
        )
        for p, a in ((longest - new, 1.0), (MIN_PROMPT, -1.0), (MIN_PROMPT, 0.5))
    ]
    # the masters as a run loads them (on the host when offloaded), then the card held to
    # `card_gib` with the engine's share taken, then the learner: its copy and its reference
    masters = "cpu" if cfg.learner.offload_optimizer or dry else device
    model = build(config, "cpu" if dry else device, torch.float32, tok).to(masters)
    free_memory()
    total, reserve, learner = card_gib * GIB, None, None
    if device.startswith("cuda"):
        card = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        plan = plan_config(
            PolicyModel.of(cfg), cfg.concurrency, cfg.league, cfg.ray.address, card_gib
        )
        row["predicted_gib"] = (plan.peak - CUDA_RUNTIME) / GIB  # all but the runtime's own
        torch.cuda.set_per_process_memory_fraction(min(1.0, total / card))
        reserve = torch.empty(int(share * total), dtype=torch.uint8, device=device)
    try:
        learner = Learner(model, tok, cfg.learner, device=device)
        model = None
        start = time.perf_counter()
        peak = measure_peak(device, lambda: learner.step(seqs), *holders(learner))
        seconds = time.perf_counter() - start
    except RuntimeError as e:
        if not out_of_memory(e):
            raise
        return {**row, "note": f"out of memory on a card held to {card_gib:g} GiB"}
    finally:
        del reserve
        learner = model = None
        if device.startswith("cuda"):
            torch.cuda.set_per_process_memory_fraction(1.0)
        free_memory()
    engine = share * total if device.startswith("cuda") else 0.0
    return {
        **row,
        "peak_gib": peak / GIB,
        "plan_ratio": row["predicted_gib"] * GIB / peak if "predicted_gib" in row else None,
        "seconds": seconds,
        "note": f"one step, {sum(len(s.prompt_ids) + len(s.completion_ids) for s in seqs)} tokens "
        f"(rows of {[len(s.prompt_ids) + len(s.completion_ids) for s in seqs]}); engine share "
        f"{engine / GIB:.1f} GiB held; fits a {card_gib:g} GiB card",
    }


# --- the table --------------------------------------------------------------------------------


def render(result: dict) -> None:
    from rich.console import Console  # start-up time: rich
    from rich.table import Table  # start-up time: rich

    c = result["ceiling"]
    unit, scale = ("TFLOP/s", 1e12) if c["bfloat16"] > 1e12 else ("GFLOP/s", 1e9)
    table = Table(
        title=f"{result['device']}: matmul bf16 {c['bfloat16'] / scale:.1f} / fp32 "
        f"{c['float32'] / scale:.1f} {unit}; torch {result['torch']}, transformers "
        f"{result['transformers']}; {result['date']}"
    )
    for col in (
        "part",
        "shape",
        "setting",
        "tokens/s",
        "MFU",
        "peak GiB",
        "plan GiB",
        "plan/peak",
        "note",
    ):
        table.add_column(
            col,
            justify="right"
            if col in ("tokens/s", "MFU", "peak GiB", "plan GiB", "plan/peak")
            else "left",
        )

    def num(row, key, fmt):
        return format(row[key], fmt) if row.get(key) is not None else "-"

    for row in result["rows"]:
        table.add_row(
            row["part"],
            row["shape"],
            row["setting"],
            num(row, "tokens_per_s", ".0f"),
            num(row, "mfu", ".1%"),
            num(row, "peak_gib", ".2f"),
            num(row, "predicted_gib", ".2f"),
            num(row, "plan_ratio", ".2f"),
            row.get("note", ""),
        )
    console = Console(width=220)
    console.print(table)
    ratios = [r["plan_ratio"] for r in result["rows"] if r.get("plan_ratio") is not None]
    close = sum(abs(x - 1) <= 0.15 for x in ratios)
    console.print(
        f"memory plan within 15% of the measured peak: {close} of {len(ratios)} steps "
        f"(plan / measured {min(ratios, default=0):.2f}-{max(ratios, default=0):.2f})"
    )


def write_tokenizer(folder: Path) -> Path:
    """SmolLM2's converted folder without its weights, as `SELFPLAY_ARENA_CACHE` expects it."""
    src = smollm2_folder()
    dst = folder / src.name
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.suffix != ".safetensors":
            shutil.copy2(f, dst / f.name)
    return dst


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dry-run", action="store_true", help="on the CPU, tiny shapes (< 1 minute)")
    p.add_argument("--out", type=Path, help="write the table's rows as JSON here")
    p.add_argument(
        "--parts",
        default="ceiling,rollout,learner,selfplay,paper",
        help="comma-separated parts to run (default: all five)",
    )
    p.add_argument(
        "--card-gib",
        type=float,
        default=80.0,
        help="the card size the paper config's step is held to (default 80)",
    )
    p.add_argument(
        "--write-tokenizer",
        type=Path,
        metavar="DIR",
        help="write SmolLM2's tokenizer (no weights) under DIR for SELFPLAY_ARENA_CACHE=DIR, then stop",
    )
    p.add_argument(
        "--cpu-seeds",
        default="0-7",
        metavar="SEEDS",
        help="seeds of the self-play part's CPU runs, one process each beside the card's run "
        "(a range A-B or a comma list; default 0-7; a dry run takes 1)",
    )
    p.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help=f"comma-separated model shapes of the rollout and learner parts (default: {','.join(SHAPES)})",
    )
    p.add_argument(
        "--settings",
        default=";".join(SETTINGS),
        help="';'-separated learner settings of the learner part (default: all four)",
    )
    p.add_argument(
        "--selfplay-steps",
        type=int,
        default=STEPS,
        help=f"steps of the self-play part's runs (default {STEPS})",
    )
    p.add_argument(
        "--deadline-minutes",
        type=float,
        default=0.0,
        help="skip the parts not begun this many minutes after the start (default 0: none)",
    )
    p.add_argument("--_cpu_run", type=int, help=argparse.SUPPRESS)  # internal: one CPU run
    p.add_argument("--_steps", type=int, help=argparse.SUPPRESS)
    p.add_argument("--_folder", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.write_tokenizer:
        print(f"wrote {write_tokenizer(args.write_tokenizer)}")
        return {}
    if args._cpu_run is not None:
        torch.set_num_threads(1)
        cpu_run(args._cpu_run, args._steps, args._folder, args.dry_run)
        return {}
    parts = {s.strip() for s in args.parts.split(",")}
    if unknown := parts - {"ceiling", "rollout", "learner", "selfplay", "paper"}:
        raise SystemExit(f"unknown part(s) {', '.join(sorted(unknown))}")
    shapes = [x.strip() for x in args.shapes.split(",")]
    settings = [x.strip() for x in args.settings.split(";")]
    if unknown := [x for x in shapes if x not in SHAPES] + [
        x for x in settings if x not in SETTINGS
    ]:
        raise SystemExit(f"unknown shape or setting {', '.join(unknown)}")
    dry = args.dry_run
    steps = 1 if dry else args.selfplay_steps
    cuda = torch.cuda.is_available() and not dry
    if not cuda and not dry:
        raise SystemExit("no CUDA device here: run on a GPU, or --dry-run on a CPU")
    device = "cuda" if cuda else "cpu"
    if dry:
        torch.set_num_threads(1)
    began = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    procs: list = []
    tok = load_tokenizer(SMOLLM2)
    name = torch.cuda.get_device_name() if cuda else f"CPU ({platform.machine()}), dry run"
    card_bytes = torch.cuda.get_device_properties(0).total_memory if cuda else 64 * GIB
    result = {
        "device": name,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "host": f"{cpu_flags()[0]}, {os.cpu_count()} CPUs",
        "date": date.today().isoformat(),
        "command": "python bench/gpu_check.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "rows": [],
    }
    seconds = {}

    def save() -> None:
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")

    def timed(part: str, fn, *, shape: str = "", setting: str = ""):
        """`fn()`, timed; a failure or the deadline becomes a row naming it."""
        failed = {"part": part, "shape": shape, "setting": setting}
        elapsed = time.perf_counter() - began
        if args.deadline_minutes and elapsed > 60 * args.deadline_minutes:
            print(
                f"[{elapsed:6.1f} s] {part} {shape} {setting}: skipped (deadline)", file=sys.stderr
            )
            return {**failed, "note": f"skipped: not begun by {args.deadline_minutes:g} minutes"}
        t, cpu = time.perf_counter(), time.process_time()
        try:
            out = fn()
        except Exception as e:  # the row says what failed; the next part runs
            traceback.print_exc()
            free_memory()
            out = {**failed, "note": f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"}
        seconds[part] = seconds.get(part, 0.0) + time.perf_counter() - t
        print(
            f"[{time.perf_counter() - began:6.1f} s] {part} done "
            f"({time.perf_counter() - t:.1f} s, {time.process_time() - cpu:.1f} CPU s)",
            file=sys.stderr,
            flush=True,
        )
        return out

    nan = {"bfloat16": float("nan"), "float32": float("nan")}
    result["ceiling"] = (
        timed("ceiling", lambda: ceiling(device, dry)) if "ceiling" in parts else nan
    )
    if "bfloat16" not in result["ceiling"]:  # the ceiling failed: its row, and no ceiling
        result["rows"].append(result["ceiling"])
        result["ceiling"] = nan
    save()
    peak_flops = result["ceiling"]["bfloat16"]
    if not peak_flops == peak_flops:  # NaN: the ceiling part skipped
        peak_flops = matmul_flops("bfloat16", 256, 0.1, device=device)
    for shape in shapes:
        model_name = SHAPES[shape]
        config = model_config(model_name)
        if dry:
            config = shrink(config)
        if "rollout" in parts:
            rows = timed(
                "rollout",
                lambda: rollouts(shape, config, tok, device, dry, peak_flops),
                shape=shape,
            )
            result["rows"] += rows if isinstance(rows, list) else [rows]
            save()
        if "learner" in parts:
            for setting in settings:
                result["rows"].append(
                    timed(
                        "learner",
                        lambda: learner_step(
                            shape, config, tok, device, setting, dry, peak_flops, card_bytes
                        ),
                        shape=shape,
                        setting=setting,
                    )
                )
                save()
    if "paper" in parts:
        row = timed("paper", lambda: paper_config(tok, device, dry, args.card_gib))
        result["rows"].append({**row, "part": "paper config"})
        save()
    if "selfplay" in parts:
        wait = (  # the CPU runs may use what is left before the deadline, and two minutes more
            None
            if not args.deadline_minutes
            else max(120.0, 60 * (args.deadline_minutes + 2) - (time.perf_counter() - began))
        )

        def run_selfplay() -> dict:
            # the CPU runs start with the card's, after the timed parts (they would slow those)
            procs.extend(
                start_cpu_runs([1] if dry else seed_list(args.cpu_seeds), steps, dry, work)
            )
            return selfplay(device, dry, procs, work, steps, wait_s=wait)

        result["rows"].append(timed("selfplay", run_selfplay))
        save()
    for proc in procs:  # CPU runs the self-play part did not wait for (skipped or failed)
        proc.kill()
    result["seconds"] = {**seconds, "total": time.perf_counter() - began}
    render(result)
    print(
        "seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in result["seconds"].items()),
        flush=True,
    )
    save()
    shutil.rmtree(work, ignore_errors=True)
    return result


def seed_list(text: str) -> list[int]:
    """Seeds from "0-7" or "0,3,5"."""
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(x) for x in text.split(",")]


if __name__ == "__main__":
    main()
