"""A training checkpoint as a Hugging Face model folder that needs no code of this project.

`export_model(source, out)` writes `out/` with

    config.json, generation_config.json   the architecture, and EOS / BOS / PAD for generation
    model.safetensors                      the weights, LoRA merged, in the dtype asked
    tokenizer.json, tokenizer_config.json, chat_template.jinja
                                           the tokenizer the policy was trained with, and the
                                           chat template its prompts were rendered with
    README.md                              a model card: base model, checkpoint, how the
                                           policy was prompted, the last evaluation table,
                                           the training config

so `transformers.AutoModelForCausalLM.from_pretrained(out)` and
`AutoTokenizer.from_pretrained(out).apply_chat_template(...)` load it, and vLLM serves it
(`vllm serve out`). The logits are the checkpoint's: the model is built as
`agents.models.load_checkpoint` builds the policy that plays `llm:<checkpoint>`.

`source` is what `llm:` takes for a checkpoint, with one difference: a run folder exports
its best-evaluated policy (`<run>/best`) when it has one, else the checkpoint a resume takes
(the newest intact one); a `checkpoints/` folder, a `step_N` folder or `best/` export as
they are. `dtype="auto"` keeps the dtype the weights were saved in (fp32 from an fp32 or a
bf16 learner: the masters). The card and `ModelExport.trained_precision` say the precision
the policy was trained in (`agents.play_precision.trained_precision`): the one to play it in.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from safetensors import safe_open

from agents.checkpoint import read_meta
from agents.models import SMOLLM2, TINY, checkpoint_config, find_checkpoint, load_checkpoint
from agents.play_precision import trained_precision
from core.output import check_output, staged

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_SAFETENSORS_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
HUB_IDS = {SMOLLM2: "HuggingFaceTB/SmolLM2-135M-Instruct"}  # built-in names -> their hub model


@dataclass
class ModelExport:
    """What `export_model` wrote."""

    path: Path
    checkpoint: Path  # the checkpoint folder it came from
    step: int
    dtype: str
    base_model: str
    lora_merged: bool
    trained_precision: str | None = None  # the precision it was trained in; None: not recorded


def source_checkpoint(source: str | os.PathLike) -> Path:
    """The checkpoint folder `source` exports (module docstring); a one-line ValueError if none.

    Args:
        source: a run folder, its `checkpoints/` folder, a `step_N` or `best/` folder (an
            `llm:` prefix is ignored).

    Returns:
        The checkpoint folder (it holds meta.json and model.safetensors).
    """
    name = str(source).removeprefix("llm:")
    path = Path(name).expanduser()
    if not path.exists():
        raise ValueError(f"no training checkpoint at {name} (no such folder)")
    if (path / "meta.json").is_file():
        return path
    if (path / "best" / "meta.json").is_file():
        return path / "best"
    found = find_checkpoint(name)
    if found is None:
        raise ValueError(
            f"no training checkpoint at {name} (give a run folder, its checkpoints/ folder, "
            "or a step_N or best/ folder)"
        )
    return found


def saved_dtype(weights: Path) -> str:
    """The dtype of the floating-point tensors in a safetensors file ("float32", "bfloat16"...)."""
    with safe_open(str(weights), "pt") as f:
        for key in f.keys():
            kind = f.get_slice(key).get_dtype()
            if kind in _SAFETENSORS_DTYPES:
                return _SAFETENSORS_DTYPES[kind]
    return "float32"


def _run_dir(folder: Path) -> Path:
    return folder.parent.parent if folder.parent.name == "checkpoints" else folder.parent


def last_evaluation(folder: Path, meta: dict) -> list[dict]:
    """The evaluation rows of the policy in `folder`: a best/ policy's own (its meta.json), else
    the run's eval.jsonl rows of the last evaluation at or before the checkpoint's step."""
    if isinstance(meta.get("eval"), list):
        return meta["eval"]
    path = _run_dir(folder) / "eval.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line
        if (
            isinstance(row, dict)
            and isinstance(row.get("step"), int)
            and row["step"] <= meta["step"]
        ):
            rows.append(row)
    last = max((r["step"] for r in rows), default=None)
    return [r for r in rows if r["step"] == last]


def _rate(row: dict) -> str:
    try:
        return f"{row['non_losing']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
    except (KeyError, TypeError, ValueError):
        return ""


def _number(row: dict, key: str, fmt: str) -> str:
    value = row.get(key)
    return format(value, fmt) if isinstance(value, (int, float)) else ""


def evaluation_table(rows: list[dict]) -> str:
    """The evaluation rows as Markdown: a table of the matches (one row per game and opponent),
    then a table of the exact exploitability rows (`eval.exploitability`), if any."""
    gaps = [r for r in rows if r.get("kind") == "exploitability"]
    lines = [
        "| game | split | opponent | games | W-D-L | non-losing [95% CI] | mean return | invalid rate |",
        "|---|---|---|---:|---|---|---:|---:|",
    ]
    for r in (r for r in rows if r.get("kind") != "exploitability"):
        wdl = f"{r.get('wins', '')}-{r.get('draws', '')}-{r.get('losses', '')}"
        lines.append(
            f"| {r.get('game', '')} | {r.get('split', '')} | {r.get('opponent', '')} | "
            f"{r.get('games', '')} | {wdl} | {_rate(r)} | {_number(r, 'mean_return', '+.3f')} | "
            f"{_number(r, 'invalid_rate', '.3f')} |"
        )
    if gaps:
        lines += [
            "",
            "| game | exploitability | NashConv | information states | method |",
            "|---|---:|---:|---:|---|",
        ]
        for r in gaps:
            lines.append(
                f"| {r.get('game', '')} | {_number(r, 'exploitability', '.4f')} | "
                f"{_number(r, 'nash_conv', '.4f')} | {r.get('states', '')} | {r.get('method', '')} |"
            )
    return "\n".join(lines)


def _precision_line(meta: dict) -> str:
    """The model card's line on the precision the policy was trained in (`agents.play_precision`)."""
    trained, source = trained_precision(meta)
    if trained is None:
        return f"- Trained in: an unrecorded precision ({source})"
    return (
        f"- Trained in: {trained} (its evaluations were played in it; load it with "
        f"`dtype=torch.{trained}` to play as trained)"
    )


def model_card(folder: Path, meta: dict, config: dict, dtype: str, where: str = "PATH") -> str:
    """The README.md of an exported checkpoint (module docstring).

    Args:
        folder: the checkpoint folder.
        meta: its meta.json.
        config: the run config it holds.
        dtype: the dtype of the exported weights.
        where: the folder's path in the card's usage snippet.

    Returns:
        The card's Markdown, with a YAML header for the hub.
    """
    base = str(config["model"])
    lora = (config.get("learner") or {}).get("lora_rank", 0) or 0
    hub = HUB_IDS.get(base.lower()) or (
        None
        if base.lower().startswith(TINY) or Path(base).expanduser().exists() or base.count("/") != 1
        else base
    )
    games = [g if isinstance(g, str) else g.get("name", "") for g in config.get("games") or []]
    front = {
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        **({"base_model": hub} if hub else {}),
        "tags": ["selfplay-arena", "reinforcement-learning", "self-play", "games"],
    }
    agent = config.get("agent") or {}
    evaluation = last_evaluation(folder, meta)
    eval_step = evaluation[0].get("step", meta["step"]) if evaluation else None
    parts = [
        "---\n" + yaml.safe_dump(front, sort_keys=False) + "---",
        f"# {_run_dir(folder).name} at step {meta['step']}",
        "A game-playing policy trained by self-play reinforcement learning with selfplay-arena"
        + (f" on {', '.join(games)}." if games else "."),
        "\n".join(
            [
                f"- Base model: `{base}`"
                + (f" ([{hub}](https://huggingface.co/{hub}))" if hub else ""),
                f"- Checkpoint: `{folder.name}` of run `{_run_dir(folder).name}`, training step {meta['step']}",
                f"- Fine-tuning: {'LoRA rank ' + str(lora) + ', merged into the weights' if lora else 'full'}",
                f"- Weights: {dtype} safetensors",
                _precision_line(meta),
            ]
        ),
        "## Use\n\n```python\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f"tokenizer = AutoTokenizer.from_pretrained({where!r})\n"
        f"model = AutoModelForCausalLM.from_pretrained({where!r})\n"
        "```\n\n"
        "The policy was trained on the chat prompts of selfplay-arena's text layer (rules, state, "
        "history and legal moves of each game), with these agent settings: "
        + (", ".join(f"`{k}={v}`" for k, v in agent.items() if k != "seed") or "the defaults")
        + ". It plays best when prompted the same way.",
        (
            f"## Evaluation (step {eval_step})\n\n{evaluation_table(evaluation)}"
            if evaluation
            else "## Evaluation\n\nThe run recorded no evaluation up to this step."
        ),
        "## Training config\n\n```yaml\n" + yaml.safe_dump(config, sort_keys=False) + "```",
    ]
    return "\n\n".join(parts) + "\n"


def export_model(
    source: str | os.PathLike,
    out: str | os.PathLike,
    dtype: str = "auto",
    overwrite: bool = False,
) -> ModelExport:
    """Write a training checkpoint as a Hugging Face model folder (module docstring).

    Args:
        source: a run folder, its `checkpoints/` folder, a `step_N` or `best/` folder.
        out: the folder to write.
        dtype: "auto" (as saved), "float32", "bfloat16" or "float16".
        overwrite: replace an existing `out` (else a ValueError).

    Returns:
        What was written: the folder, the checkpoint and step, the dtype, the base model.
    """
    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (choose from auto, {', '.join(DTYPES)})")
    folder = source_checkpoint(source)
    check_output(out, overwrite)  # before the model loads
    meta = read_meta(folder)
    config = checkpoint_config(folder)
    if dtype == "auto":
        dtype = saved_dtype(folder / "model.safetensors")
    model, tokenizer = load_checkpoint(folder, dtype="float32", device="cpu")
    model = model.to(DTYPES[dtype])
    for key in ("eos_token_id", "bos_token_id", "pad_token_id"):
        value = getattr(tokenizer, key, None)
        if value is not None:
            setattr(model.generation_config, key, value)
            setattr(model.config, key, value)
    with staged(out, overwrite) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "README.md").write_text(
            model_card(folder, meta, config, dtype, str(out)), encoding="utf-8"
        )
    return ModelExport(
        Path(out),
        folder,
        meta["step"],
        dtype,
        str(config["model"]),
        bool((config.get("learner") or {}).get("lora_rank", 0)),
        trained_precision(meta)[0],
    )
