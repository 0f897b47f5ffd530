"""A Ray rollout worker built in process (`training.ray_rollouts.RolloutWorker`): the device it runs the policy on."""

import pytest
import torch

from tests.tiny_run import tiny
from training.sections import PolicyModel


def test_a_ray_rollout_worker_runs_the_policy_on_the_configs_device(tmp_path, monkeypatch):
    """Built in this process (no Ray needed for its constructor): device cpu stays on the CPU even
    when a GPU is in sight, as the learner does; device cuda without a GPU is a one-line error."""
    from training.ray_rollouts import RolloutWorker, WorkerSetup, worker_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU in sight
    on_cpu = tiny(tmp_path, device="cpu", learner={"precision": "float32"})
    worker = RolloutWorker(WorkerSetup(PolicyModel.of(on_cpu), on_cpu.games, "float32"), 1)
    assert (
        worker.backend.device.type == "cpu"
        and next(worker.backend.model.parameters()).device.type == "cpu"
    )
    assert [worker_device(d, True) for d in ("auto", "cpu", "cuda", "cuda:1")] == [
        "cuda",
        "cpu",
        "cuda",
        "cuda",
    ]
    assert [worker_device(d, False) for d in ("auto", "cpu")] == ["cpu", "cpu"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device cuda:0: this Ray rollout worker sees no GPU"):
        on_gpu = tiny(tmp_path, device="cuda:0", learner={"precision": "float32"})
        RolloutWorker(WorkerSetup(PolicyModel.of(on_gpu), on_gpu.games, "float32"), 1)
