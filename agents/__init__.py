"""Everything that chooses moves, and `make_agent(spec)` to build one from a name or dict.

Specs (strings or YAML mappings):
    random | mcts[:SIMULATIONS] | minimax[:DEPTH] | cfr[:ITERATIONS] | human
    always_cooperate | always_defect | tit_for_tat | grim_trigger | win_stay_lose_shift | probe
    sustainable | greedy   commons fishers (agents.commons_bots)
    werewolf_heuristic[,reveal=false]     a scripted Werewolf player (agents.werewolf_bots)
    codewords_tags | codewords_random    (codewords only: agents.codewords_bots)
    llm:MODEL            an LLM agent over the transformers backend (MODEL = smollm2-135m,
                         tiny-llama, a local folder, a hub id, or a training checkpoint /
                         run directory, which also brings the agent settings it was
                         trained with); bare smollm2-135m and tiny-llama work too
    {type: llm, model: ..., backend: transformers|vllm|openai, base_url: ..., <LLMAgentConfig fields>}
    {type: mcts, simulations: 200}   (any bot with its keyword arguments)
A string spec takes the same keyword arguments after commas, values read as YAML:
    llm:smollm2-135m,fallback=random,max_retries=2,temperature=0.3
    llm:my-model,backend=openai,base_url=http://localhost:8000/v1
    llm:smollm2-135m,dtype=bfloat16   weights dtype of a local model: float32, bfloat16 or auto
                                      (default: bf16 on a GPU, on a CPU the faster by measurement;
                                      a training checkpoint: the precision it was trained in,
                                      `agents.play_precision`, said in a line on stderr)
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from agents import bots
from agents.base import Agent, PendingTurn, decision
from agents.codewords_bots import CODEWORDS_BOTS
from agents.commons_bots import COMMONS_BOTS
from agents.llm_agent import LLMAgent, LLMAgentConfig
from agents.models import check_name, checkpoint_config, find_checkpoint
from agents.play_precision import checkpoint_precision
from agents.social_bots import STRATEGIES
from agents.werewolf_bots import WEREWOLF_BOTS
from core.machine import announce_threads

__all__ = ["Agent", "PendingTurn", "decision", "make_agent", "parse_spec", "check_spec", "BOTS"]

BOTS = ("random", "mcts", "minimax", "cfr", "human")
_BACKENDS: dict[
    tuple, Any
] = {}  # one backend per (kind, model, url, options): agents on a model share its batches


GAME_BOTS: dict[str, Any] = {  # scripted bots of one game, by name
    **COMMONS_BOTS,
    **CODEWORDS_BOTS,
    **WEREWOLF_BOTS,
}


def _social_names() -> tuple[str, ...]:
    return (*STRATEGIES, *GAME_BOTS)


def unknown_agent(kind: str) -> ValueError:
    """The one-line error for an agent type nothing builds, with a did-you-mean."""
    names = [*BOTS, *_social_names(), "llm"]
    close = difflib.get_close_matches(str(kind), names, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    known = ", ".join([*BOTS, *_social_names(), "llm:MODEL"])
    return ValueError(f"unknown agent {kind!r}{hint} (known: {known})")


def parse_spec(spec: str | dict) -> dict:
    """An agent spec (see the module docstring) as a dict with its `type` and keyword arguments.

    Args:
        spec: a string spec (`mcts:200`, `llm:smollm2-135m,temperature=0.3`) or a mapping.

    Returns:
        A new dict: `type` plus the spec's options; builds nothing.

    Raises:
        ValueError: a malformed spec (no type, a bad `:N`, an option without `=`, an unknown
            agent type).
    """
    if isinstance(spec, dict):
        if "type" not in spec:
            raise ValueError(
                f"agent spec {spec} needs a 'type' (random, mcts, minimax, cfr, human, llm, or a social strategy)"
            )
        return dict(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"agent spec must be a name or a mapping, got {spec!r}")
    head, *options = spec.strip().split(",")
    kind, _, arg = head.partition(":")
    d: dict[str, Any] = {"type": kind}
    if kind in ("mcts", "minimax", "cfr") and arg:
        if not arg.isdigit():
            raise ValueError(f"agent spec {spec!r}: {kind}:N needs a whole number, got {arg!r}")
        d[{"mcts": "simulations", "minimax": "depth", "cfr": "iterations"}[kind]] = int(arg)
    elif kind == "llm":
        if not arg:
            raise ValueError("llm agent spec needs a model: llm:MODEL (e.g. llm:smollm2-135m)")
        d["model"] = arg
    elif kind in ("smollm2-135m", "tiny-llama") or kind.startswith("tiny-llama"):
        d = {"type": "llm", "model": head}
    elif kind not in (*BOTS, *_social_names()):
        raise unknown_agent(kind)
    elif arg:
        raise ValueError(f"agent spec {spec!r}: {kind} takes no ':' argument")
    for opt in options:  # ",key=value" options; values read as YAML scalars (true, 0.5, 3, text)
        key, eq, value = opt.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"agent spec {spec!r}: options are key=value, got {opt!r}")
        d[key.strip()] = yaml.safe_load(value) if value.strip() else ""
    return d


def backend_for(kind: str, model: str, base_url: str | None = None, **kwargs):
    """A shared backend instance for (kind, model, url, options): agents with other options
    (another dtype) get their own."""
    key = (kind, model, base_url, repr(sorted(kwargs.items())))
    if kind in ("transformers", "vllm"):  # a local model runs on the threads chosen at start
        announce_threads()
    if key not in _BACKENDS:
        if kind == "transformers":
            from agents.transformers_backend import TransformersBackend  # start-up time: torch

            _BACKENDS[key] = TransformersBackend(model, **kwargs)
        elif kind == "vllm":
            from agents.vllm_backend import VLLMBackend  # optional: vllm

            _BACKENDS[key] = VLLMBackend(model, **kwargs)
        elif kind in ("openai", "http"):
            from agents.openai_backend import OpenAIBackend  # start-up time: httpx

            if not base_url:
                raise ValueError(
                    "the openai backend needs base_url (e.g. http://localhost:8000/v1)"
                )
            _BACKENDS[key] = OpenAIBackend(base_url, model, **kwargs)
        else:
            raise ValueError(f"unknown backend {kind!r}; choose transformers, vllm or openai")
    return _BACKENDS[key]


def _checkpoint_folder(spec: str | dict) -> Path | None:
    """The training checkpoint folder an llm spec over the transformers backend plays, else None
    (a bot, a hub model, a server, or not an agent spec: building it will say why)."""
    try:
        d = parse_spec(spec)
    except ValueError:  # not an agent spec: building it will say why
        return None
    if (
        d.get("type") != "llm"
        or d.get("backend", "transformers") != "transformers"
        or not d.get("model")
    ):
        return None
    return find_checkpoint(str(d["model"]))


def checkpoint_of(spec: str | dict) -> str | None:
    """The training checkpoint an llm spec plays, as "FOLDER (step N)", else None (a bot, a hub model, a
    server): what a resumed evaluation must still be playing (`llm:RUN` moves on as RUN trains, `best/` as a
    better policy replaces it)."""
    from agents.checkpoint import read_meta  # start-up time: torch

    folder = _checkpoint_folder(spec)
    return None if folder is None else f"{folder.resolve()} (step {read_meta(folder)['step']})"


def trained_games(spec: str | dict) -> list[tuple[str, dict]] | None:
    """(game, params) of each game a training checkpoint's run trained on, read from its saved
    config, when `spec` plays a checkpoint (`llm:RUN`, `llm:RUN/best`, a checkpoint folder);
    None for anything else. Reads meta.json only: no model loads."""
    folder = _checkpoint_folder(spec)
    return None if folder is None else _games_of(checkpoint_config(folder))


def _games_of(config: dict) -> list[tuple[str, dict]]:
    """(game, params) of the games in a training run's config."""
    return [
        (g["name"], dict(g.get("params") or {}))
        for g in config.get("games") or []
        if isinstance(g, dict) and "name" in g
    ]


def check_spec(spec: str | dict, games: Sequence[tuple[str, dict]] = ()) -> None:
    """ValueError or RuntimeError (one line) for a spec `make_agent` would refuse, found without
    loading a model: an unknown agent or option, a bot's bad argument, an LLM's model name that
    nothing can load (`agents.models.check_name`: a typo, a missing checkpoint folder), a checkpoint
    whose config or weights file is damaged. Bots are built (cheap), and a bot that cannot play one of
    `games` ((name, params) pairs) says so (`WrongGame`, its `check_game`: minimax on poker, cfr on
    a tree too large to solve)."""
    d = parse_spec(spec)
    if d.get("type") != "llm":
        agent = make_agent(spec)
        for game, params in games if hasattr(agent, "check_game") else ():
            agent.check_game(game, dict(params or {}))
        return
    if not d.get("model"):
        raise ValueError(f"llm agent {spec!r} needs a model")
    if d.get("backend", "transformers") in ("transformers", "vllm"):
        check_name(str(d["model"]))
        if (folder := find_checkpoint(str(d["model"]))) is not None:
            from agents.checkpoint import check_weights  # start-up time: torch

            checkpoint_config(folder)  # names its base model
            check_weights(folder / "model.safetensors")  # the header only
    backend_keys = {"type", "name", "model", "backend", "base_url", "backend_kwargs", "dtype"}
    unknown = set(d) - backend_keys - set(LLMAgentConfig.__dataclass_fields__)
    if unknown:
        raise ValueError(
            f"llm agent {d['model']!r}: unknown option(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(LLMAgentConfig.__dataclass_fields__))}"
        )


def make_agent(spec: str | dict, name: str | None = None) -> Agent:
    """Build an agent from a spec (see the module docstring)."""
    d = parse_spec(spec)
    kind = d.pop("type")
    named = d.pop("name", None)  # a mapping's own name; an explicit `name` wins
    name = name or named or (spec if isinstance(spec, str) else kind)
    bot_classes = {
        "random": bots.RandomAgent,
        "mcts": bots.MCTSAgent,
        "minimax": bots.MinimaxAgent,
        "cfr": bots.CFRAgent,
        "human": bots.HumanAgent,
    }
    if kind in _social_names():
        bot_classes[kind] = {**STRATEGIES, **GAME_BOTS}[kind]
    if kind in bot_classes:
        try:
            return bot_classes[kind](name, **d)
        except TypeError as e:  # an unknown keyword argument
            raise ValueError(f"agent {name!r}: {e}") from None
    if kind == "llm":
        return _llm_agent(name, d)
    raise unknown_agent(kind)


def _llm_agent(name: str, d: dict) -> LLMAgent:
    """The LLM agent of a parsed llm spec `d` (without its type). A training checkpoint brings the
    agent settings it was trained with as defaults and plays in its training precision
    (`agents.play_precision`), saying so on stderr."""
    model = d.pop("model", None)
    if not model:
        raise ValueError(f"llm agent {name!r} needs a model")
    backend_kind = d.pop("backend", "transformers")
    base_url = d.pop("base_url", None)
    backend_kwargs = d.pop("backend_kwargs", {}) or {}
    if "dtype" in d:  # a backend option, written beside the agent's for short specs
        backend_kwargs = {**backend_kwargs, "dtype": d.pop("dtype")}
    if backend_kind in ("transformers", "vllm"):
        check_name(model)  # a typo fails here in seconds, not after importing torch
    fields = set(LLMAgentConfig.__dataclass_fields__)
    ckpt = find_checkpoint(model) if backend_kind == "transformers" else None
    config = {} if ckpt is None else checkpoint_config(ckpt)
    trained = config.get("agent") or {}  # a checkpoint plays as trained unless told otherwise
    d = {**{k: v for k, v in trained.items() if k in fields and k != "seed"}, **d}
    unknown = set(d) - fields
    if unknown:
        raise ValueError(
            f"llm agent {name!r}: unknown option(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(fields))}"
        )
    precision = None
    if ckpt is not None:
        precision = checkpoint_precision(
            ckpt, backend_kwargs.get("dtype"), backend_kwargs.get("device", "auto")
        )
        backend_kwargs = {**backend_kwargs, "dtype": precision.dtype}
    agent = LLMAgent(
        name, backend_for(backend_kind, model, base_url, **backend_kwargs), LLMAgentConfig(**d)
    )
    # (game, params) it trained on: arena.runner warns on other params
    agent.trained_games = None if ckpt is None else _games_of(config)
    agent.precision = None if precision is None else precision.dtype  # the dtype it plays in
    return agent
