"""A training checkpoint plays in the precision it was trained in, unless its spec names a dtype,
on a CPU with native bf16 and on one without (the bf16 check `core.machine.fastest_dtype`
monkeypatched either way), and the precision it plays in is said on stderr."""

import json
from types import SimpleNamespace

import pytest
import torch

import core.machine
from agents import checkpoint, make_agent
from agents.hf_export import export_model
from agents.models import tiny_llama
from agents.play_precision import play_precision, trained_precision
from training.learner import Learner
from training.learner_config import LearnerConfig


@pytest.fixture(params=[True, False], ids=["bf16_native", "no_bf16"])
def native(request, monkeypatch):
    """Whether this CPU runs bf16 natively, as dtype auto measures it (`fastest_dtype`)."""
    choice = "bfloat16" if request.param else "float32"
    monkeypatch.setattr(core.machine, "fastest_dtype", lambda *a, **k: choice)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return request.param


def policy(folder, recorded: str | None, configured: str | None = None):
    """A saved tiny-llama policy whose meta.json records `recorded` (None: a checkpoint saved
    before the precision was recorded) and whose run config names `configured`."""
    model = tiny_llama(0)[0]
    learner = SimpleNamespace(model=model, compute_dtype=recorded)
    config = {"model": "tiny-llama", "agent": {"constrained": True}}
    if configured is not None:
        config["learner"] = {"precision": configured}
    return checkpoint.save_policy(folder, learner, 5, config=config)


def dtype_played(spec: str) -> torch.dtype:
    agent = make_agent(spec)
    played = next(agent.backend.model.parameters()).dtype
    assert str(played).removeprefix("torch.") == agent.precision
    return played


@pytest.mark.parametrize("trained", ["float32", "bfloat16"])
def test_auto_plays_a_checkpoint_in_its_training_precision(tmp_path, native, trained, capsys):
    folder = policy(tmp_path / "best", trained, "auto")
    assert dtype_played(f"llm:{folder}") == getattr(torch, trained)
    assert dtype_played(f"llm:{folder},dtype=auto") == getattr(torch, trained)
    err = capsys.readouterr().err
    assert f"checkpoint {folder} plays in {trained}, the precision it was trained in" in err


@pytest.mark.parametrize("trained", ["float32", "bfloat16"])
def test_an_explicit_dtype_wins(tmp_path, native, trained, capsys):
    other = "bfloat16" if trained == "float32" else "float32"
    folder = policy(tmp_path / "best", trained)
    assert dtype_played(f"llm:{folder},dtype={other}") == getattr(torch, other)
    err = capsys.readouterr().err
    assert f"checkpoint {folder} plays in {other} as asked (trained in {trained})" in err


def test_an_older_checkpoint_takes_its_configs_precision(tmp_path, native, capsys):
    folder = policy(tmp_path / "best", None, "float32")
    assert dtype_played(f"llm:{folder}") == torch.float32
    assert "(its config's learner.precision; dtype=bfloat16 overrides)" in capsys.readouterr().err


def test_an_older_auto_checkpoint_falls_back_to_dtype_auto(tmp_path, native, capsys):
    folder = policy(tmp_path / "best", None, "auto")
    machine = "bfloat16" if native else "float32"
    assert dtype_played(f"llm:{folder}") == getattr(torch, machine)
    err = capsys.readouterr().err
    assert (
        f"checkpoint {folder} plays in {machine}, dtype auto's choice on this machine: its "
        "training precision is unknown (its config's learner.precision is auto and meta.json "
        "records no precision)"
    ) in err


def test_a_checkpoint_records_the_learners_resolved_precision(tmp_path, native):
    """`precision: auto` is recorded as what it resolved to where the run trained: the policy then
    plays in it on any machine."""
    model, tok = tiny_llama(0)
    learner = Learner(model, tok, LearnerConfig(precision="auto"))
    trained = "bfloat16" if native else "float32"
    assert learner.compute_dtype == trained
    folder = checkpoint.save(tmp_path, learner, 1, config={"model": "tiny-llama"})
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["precision"] == trained and meta["config"] == {"model": "tiny-llama"}
    assert checkpoint.load(tmp_path, learner)["precision"] == trained
    best = checkpoint.save_policy(tmp_path / "best", learner, 1, config={"model": "tiny-llama"})
    assert checkpoint.read_meta(best)["precision"] == trained
    assert play_precision(folder, meta).dtype == trained


def test_trained_precision_sources():
    assert trained_precision({"precision": "bfloat16", "config": {}}) == (
        "bfloat16",
        "its meta.json",
    )
    assert trained_precision({"config": {"learner": {"precision": "float32"}}}) == (
        "float32",
        "its config's learner.precision",
    )
    assert trained_precision({"config": {"model": "m"}})[0] is None  # learner.precision: auto
    with pytest.raises(ValueError, match="dtype/precision must be one of"):
        play_precision(None, {"precision": "float32"}, asked="float16")


def test_export_says_the_training_precision(tmp_path):
    folder = policy(tmp_path / "run" / "best", "bfloat16")
    done = export_model(folder, tmp_path / "out")
    assert done.trained_precision == "bfloat16" and done.dtype == "float32"  # weights as saved
    card = (tmp_path / "out" / "README.md").read_text()
    assert "- Trained in: bfloat16 (its evaluations were played in it" in card


@pytest.mark.parametrize("trained", ["float32", "bfloat16"])
def test_arena_serve_serves_a_checkpoint_in_its_training_precision(
    tmp_path, native, trained, capsys
):
    from server.serve import build_backend

    folder = policy(tmp_path / "best", trained, "auto")
    backend = build_backend(str(folder), dtype="auto")
    assert next(backend.model.parameters()).dtype == getattr(torch, trained)
    assert f"checkpoint {folder} plays in {trained}" in capsys.readouterr().err
    other = "bfloat16" if trained == "float32" else "float32"
    asked = build_backend(str(folder), dtype=other)
    assert next(asked.model.parameters()).dtype == getattr(torch, other)
