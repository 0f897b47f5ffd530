"""Per-role policies: one LoRA adapter per role on a shared base, each trained on its own
role's turns only (`training.roles`, `Learner(roles=...)`), on the real tiny Llama."""

import pytest
import torch

from agents.models import tiny_llama
from training.learner import Learner
from training.learner_config import LearnerConfig
from training.sequences import TrainingSequence

ROLES = ("first", "second")


@pytest.fixture(scope="module")
def tok():
    return tiny_llama(0)[1]


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def config(**over) -> LearnerConfig:
    return LearnerConfig(lr=1e-2, lora_rank=4, precision="float32", weight_decay=0.1, **over)


def role_learner(roles=ROLES, **over) -> Learner:
    torch.manual_seed(0)
    model, tok = tiny_llama(0)
    return Learner(model, tok, config(**over), roles=roles)


def turns(tok, role: str) -> list[TrainingSequence]:
    """Two turns of `role`, with advantages of both signs."""
    return [
        TrainingSequence(
            ids(tok, f"{role}: the board"), ids(tok, " 4") + [tok.eos_token_id], 1.0, role=role
        ),
        TrainingSequence(ids(tok, f"{role}: your move"), ids(tok, " 7 wins"), -0.5, role=role),
    ]


def adapter(learner: Learner, role: str) -> dict[str, torch.Tensor]:
    """The weights of `role`'s adapter, under names without the role."""
    return {
        n.replace(f".{role}.", "."): p.detach().clone()
        for n, p in learner.model.named_parameters()
        if "lora_" in n and f".{role}." in n
    }


def test_an_adapter_gets_gradient_only_from_its_roles_turns(tok):
    learner = role_learner()
    learner.step(turns(tok, "second"))  # the gradients stay on the weights after the step
    first, second = learner.role_parameters("first"), learner.role_parameters("second")
    assert first and second
    assert all(p.grad is None or not p.grad.any() for p in first)
    assert any(p.grad is not None and p.grad.any() for p in second)
    learner.step(turns(tok, "first") + turns(tok, "second"))
    assert any(p.grad is not None and p.grad.any() for p in first)


def test_a_step_leaves_the_adapter_of_a_role_without_turns_bitwise_unchanged(tok):
    learner = role_learner()
    learner.step(turns(tok, "first") + turns(tok, "second"))  # both have AdamW state now
    before = {r: adapter(learner, r) for r in ROLES}
    learner.step(turns(tok, "second"))
    after = {r: adapter(learner, r) for r in ROLES}
    assert all(torch.equal(before["first"][k], after["first"][k]) for k in before["first"])
    assert any(not torch.equal(before["second"][k], after["second"][k]) for k in before["second"])


def test_a_role_trains_as_its_own_single_adapter_learner_would(tok):
    """The mixed batch's step moves role `first`'s adapter exactly as a one-policy learner,
    started from the same adapter, moves its own on `first`'s turns alone (the other role's
    turns change neither its loss normalisation nor its gradient clipping)."""
    mixed = role_learner(max_grad_norm=0.05)
    torch.manual_seed(0)
    model, _ = tiny_llama(0)
    alone = Learner(model, tok, config(max_grad_norm=0.05))
    start = adapter(mixed, "first")
    with torch.no_grad():
        for n, p in alone.model.named_parameters():
            if "lora_" in n:
                p.copy_(start[n.replace(".default.", ".")])
    mine = turns(tok, "first")
    mixed.step(mine + turns(tok, "second") * 3)
    alone.step([TrainingSequence(s.prompt_ids, s.completion_ids, s.advantage) for s in mine])
    got = adapter(mixed, "first")
    want = adapter(alone, "default")
    assert any(not torch.equal(start[k], got[k]) for k in start)
    for k in got:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_logprobs_are_each_roles_own(tok):
    learner = role_learner()
    seqs = turns(tok, "first") + turns(tok, "second")
    learner.step(seqs)  # the adapters now differ
    both = learner.logprobs(seqs)
    for role in ROLES:
        alone = learner.logprobs([s for s in seqs if s.role == role])
        assert alone == [lp for s, lp in zip(seqs, both) if s.role == role]
    assert learner.logprobs(turns(tok, "first")) != learner.logprobs(
        [
            TrainingSequence(s.prompt_ids, s.completion_ids, s.advantage, role="second")
            for s in turns(tok, "first")
        ]
    )


def test_roles_need_lora_and_known_roles(tok):
    model, _ = tiny_llama(0)
    with pytest.raises(ValueError, match="learner.lora_rank must be > 0 with roles"):
        Learner(model, tok, LearnerConfig(precision="float32"), roles=ROLES)
    learner = role_learner()
    with pytest.raises(ValueError, match="role third: this learner trains first, second"):
        learner.step(turns(tok, "third"))
