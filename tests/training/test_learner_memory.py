"""The learner's memory options on the real tiny Llama: an offloaded optimizer and gradient
checkpointing change where tensors live and what is kept, never the arithmetic."""

import pytest
import torch

from agents import checkpoint
from agents.models import tiny_llama
from training.learner import Learner
from training.learner_config import LearnerConfig
from training.loss import LossConfig
from training.sequences import TrainingSequence


@pytest.fixture(scope="module")
def tok():
    return tiny_llama(0)[1]


def seqs(tok, n=6, prompt=40, completion=6):
    """`n` sequences of random token ids (fixed seed) with mixed-sign advantages."""
    g = torch.Generator().manual_seed(0)
    vocab = len(tok)
    return [
        TrainingSequence(
            torch.randint(100, vocab, (prompt + i,), generator=g).tolist(),
            torch.randint(100, vocab, (completion,), generator=g).tolist(),
            (-1.0) ** i * (1 + i / 10),
        )
        for i in range(n)
    ]


def learner(precision, **options):
    model, tokenizer = tiny_llama(0)
    cfg = LearnerConfig(
        lr=1e-3, precision=precision, loss=LossConfig(kl_coef=0.1, entropy_coef=0.01), **options
    )
    return Learner(model, tokenizer, cfg)


def weights(lrn):
    return {k: v.detach().clone() for k, v in lrn.model.state_dict().items()}


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_gradient_checkpointing_takes_the_same_steps(tok, precision):
    """Recomputing each layer in the backward gives the very same gradients, so the same
    weights after two steps (bf16 on a CPU: the learner's own attention in the recompute too)."""
    batch = seqs(tok)
    plain, checkpointed = learner(precision), learner(precision, gradient_checkpointing=True)
    for _ in range(2):
        a, b = plain.step(batch), checkpointed.step(batch)
        assert a["loss"] == b["loss"]
    for (name, x), y in zip(weights(plain).items(), weights(checkpointed).values()):
        assert torch.equal(x, y), name


def saved_bytes(lrn, batch) -> int:
    """Bytes autograd keeps for the backward of one policy forward (tensors saved outside the
    checkpointed layers; gradient checkpointing keeps the rest to itself and recomputes it)."""
    kept = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    params = {p.untyped_storage().data_ptr() for p in lrn.policy.parameters()}
    lrn.policy.train()
    mb = lrn._micro_batches(batch)[0]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lrn._logprobs(lrn.policy, mb, None)
    return sum(n for ptr, n in kept.items() if ptr not in params)


def test_gradient_checkpointing_keeps_a_fraction_of_the_activations(tok):
    batch = seqs(tok, n=4, prompt=200, completion=2)
    plain = saved_bytes(learner("float32"), batch)
    checkpointed = saved_bytes(learner("float32", gradient_checkpointing=True), batch)
    assert checkpointed < 0.6 * plain


def test_checkpointing_is_off_in_rollouts(tok):
    """The backend's decoding (eval mode) keeps its KV cache: checkpointing acts in training only."""
    lrn = learner("float32", gradient_checkpointing=True)
    assert lrn.policy.is_gradient_checkpointing
    lrn.policy.eval()
    ids = torch.tensor([seqs(tok, n=1)[0].prompt_ids])
    with torch.no_grad():
        out = lrn.policy(input_ids=ids, use_cache=True)
    assert out.past_key_values is not None


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_offloaded_optimizer_takes_the_same_steps_with_its_state_on_the_host(tok, precision):
    batch = seqs(tok)
    resident, offloaded = learner(precision), learner(precision, offload_optimizer=True)
    assert offloaded.master_device == torch.device("cpu")
    for _ in range(2):
        resident.step(batch)
        offloaded.step(batch)
    for (name, x), y in zip(weights(resident).items(), weights(offloaded).values()):
        assert torch.equal(x, y), name
    state = [v for s in offloaded.optimizer.state.values() for v in s.values() if v.dim()]
    assert state and all(v.device.type == "cpu" and v.dtype == torch.float32 for v in state)
    assert all(p.device.type == "cpu" for p in offloaded.model.parameters())


def test_offloaded_learner_resumes_exactly(tok, tmp_path):
    """A checkpoint of an offloaded learner restores masters and optimizer state on the host
    and the compute copy from them: the next step is the uninterrupted learner's."""
    batch = seqs(tok)
    a = learner("bfloat16", offload_optimizer=True)
    a.step(batch)
    folder = checkpoint.save(tmp_path, a, step=1, config={"model": "tiny-llama"})
    a.step(batch)
    b = learner("bfloat16", offload_optimizer=True)
    checkpoint.load(folder, b)
    b.step(batch)
    for (name, x), y in zip(weights(a).items(), weights(b).values()):
        assert torch.equal(x, y), name
    for (name, x), y in zip(a.policy.state_dict().items(), b.policy.state_dict().values()):
        assert torch.equal(x, y), name


def test_learner_takes_its_device_apart_from_the_model(tok):
    """`device` places the passes; the masters stay where the learner keeps them."""
    model, tokenizer = tiny_llama(0)
    lrn = Learner(model, tokenizer, LearnerConfig(precision="bfloat16"), device="cpu")
    assert lrn.device == torch.device("cpu") and lrn.master_device == lrn.device
    assert next(lrn.policy.parameters()).dtype == torch.bfloat16
    assert next(lrn.model.parameters()).dtype == torch.float32
