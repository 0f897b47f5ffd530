"""Checkpoints: atomic on disk, and a resumed run is bit-for-bit the uninterrupted one."""

import json
import random

import numpy as np
import pytest
import torch

from agents import checkpoint
from agents.models import tiny_llama
from training.league import League
from training.learner import Learner
from training.learner_config import LearnerConfig
from training.loss import LossConfig
from training.sequences import TrainingSequence

STEPS, SPLIT = 4, 2


@pytest.fixture(scope="module")
def tok():
    return tiny_llama(0)[1]


def make_batches(tok):
    """Fixed token batches: real tokenised prompts and completions; three of the four prompts
    share their rules (the learner's prefix tree computes them once)."""
    rules = "Tic-tac-toe: three in a row wins; answer with a cell. "
    texts = [
        (rules + "X to move. Board: ...|...|...", " 4"),
        (rules + "O to move. Board: X..|...|...", " 0 is best"),
        ("Kuhn poker, you hold K.", " bet"),
        (rules + "Pick a cell", " 8<|im_end|>"),
    ]
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]
    return [
        [TrainingSequence(enc(p), enc(c), 0.0) for p, c in texts[i:] + texts[:i]]
        for i in range(len(texts))
    ]


def train(learner, batches, steps, rng):
    """A stand-in training loop that consumes python, numpy-global and Generator randomness."""
    for _ in range(steps):
        b = batches[random.randrange(len(batches))]
        noise = np.random.normal(size=len(b))
        adv = rng.normal(size=len(b)) + noise
        target = (lambda a: float(a)) if learner.value_head is not None else (lambda a: None)
        learner.step(
            [
                TrainingSequence(s.prompt_ids, s.completion_ids, float(a), value_target=target(a))
                for s, a in zip(b, adv)
            ]
        )


def seed_all(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


@pytest.mark.parametrize(
    "cfg",
    [
        LearnerConfig(lr=1e-3, loss=LossConfig(kl_coef=0.1, dual_clip=1.4)),
        LearnerConfig(lr=1e-3, lora_rank=4, lora_dropout=0.2),  # dropout draws from the torch RNG
        LearnerConfig(lr=1e-3, value_coef=0.5),
        LearnerConfig(
            lr=1e-3, loss=LossConfig(entropy_coef=0.02, entropy_target=20.0, entropy_coef_step=0.01)
        ),  # coefficient rises each step
        LearnerConfig(
            lr=1e-3, precision="bfloat16", loss=LossConfig(kl_coef=0.1)
        ),  # the bf16 copy is rebuilt from the loaded masters
        LearnerConfig(lr=1e-3, precision="float32"),
        LearnerConfig(lr=1e-3, shared_prefix=False, loss=LossConfig(kl_coef=0.1)),
        LearnerConfig(
            lr=1e-3, micro_batch_tokens=40, value_coef=0.5, loss=LossConfig(kl_coef=0.1)
        ),  # micro-batches sharing the rules through a trunk
    ],
    ids=["full", "lora", "critic", "adaptive_entropy", "bf16", "fp32", "per_sequence", "trunk"],
)
def test_resume_equals_uninterrupted_run(tmp_path, tok, cfg):
    batches = make_batches(tok)
    lg = League()
    lg.add("random", "bot", "random")
    lg.record("random", 1.0)

    rng = seed_all(0)
    straight = Learner(tiny_llama(0)[0], tok, cfg)
    train(straight, batches, STEPS, rng)

    rng = seed_all(0)
    first = Learner(tiny_llama(0)[0], tok, cfg)
    train(first, batches, SPLIT, rng)
    checkpoint.save(
        tmp_path,
        first,
        SPLIT,
        config={"lr": cfg.lr},
        league=lg.state_dict(),
        state={"rae": {"g/p0": 0.25}},
        rng=rng,
    )
    del first
    seed_all(123)  # the resumed process starts from different RNG states and other weights
    rng = np.random.default_rng(999)
    resumed = Learner(tiny_llama(7)[0], tok, cfg)
    meta = checkpoint.load(tmp_path, resumed, rng=rng)
    assert meta["step"] == SPLIT and resumed.step_count == SPLIT
    assert League.from_state_dict(meta["league"]) == lg and meta["state"] == {"rae": {"g/p0": 0.25}}
    train(resumed, batches, STEPS - SPLIT, rng)

    for (n, a), (_, b) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.equal(a, b), n
    assert resumed.entropy_coef == straight.entropy_coef
    if cfg.loss.entropy_target:
        assert straight.entropy_coef == pytest.approx(0.02 + STEPS * 0.01)
    if cfg.value_coef:
        assert torch.equal(straight.value_head.weight, resumed.value_head.weight)
        assert straight.value_head.weight.abs().sum() > 0


def test_rng_streams_are_restored(tmp_path, tok):
    learner = Learner(tiny_llama(0)[0], tok, LearnerConfig())
    rng = seed_all(5)
    checkpoint.save(tmp_path, learner, 0, rng=rng)
    expected = (random.random(), np.random.rand(), torch.rand(1).item(), rng.random())
    seed_all(6)
    rng2 = np.random.default_rng(0)
    checkpoint.load(tmp_path, learner, rng=rng2)
    assert (random.random(), np.random.rand(), torch.rand(1).item(), rng2.random()) == expected


def test_atomic_layout_latest_pointer_and_pruning(tmp_path, tok):
    learner = Learner(tiny_llama(0)[0], tok, LearnerConfig())
    for step in (1, 2, 3, 4):
        checkpoint.save(tmp_path, learner, step, keep=2)
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_00000003", "step_00000004"]
    assert checkpoint.latest(tmp_path).name == "step_00000004"
    assert not list(tmp_path.glob(".tmp-*"))
    # a run killed mid-save leaves a temp folder; it is never mistaken for a checkpoint
    (tmp_path / ".tmp-step_00000005-1").mkdir()
    assert checkpoint.latest(tmp_path).name == "step_00000004"
    assert checkpoint.load(tmp_path, learner)["step"] == 4
    # a failing save (state not JSON-serialisable) leaves the previous checkpoint in place
    with pytest.raises(ValueError, match="JSON"):
        checkpoint.save(tmp_path, learner, 5, state={"bad": object()})
    assert checkpoint.latest(tmp_path).name == "step_00000004"
    assert not (tmp_path / "step_00000005").exists()


def test_load_errors(tmp_path, tok):
    learner = Learner(tiny_llama(0)[0], tok, LearnerConfig())
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        checkpoint.load(tmp_path, learner)
    checkpoint.save(tmp_path, learner, 1)
    bigger = Learner(tiny_llama(0, hidden=32)[0], tok, LearnerConfig())
    with pytest.raises(ValueError, match="does not fit this model"):
        checkpoint.load(tmp_path, bigger)


DAMAGE = {  # file -> what a killed or faulty writer (or disk) left in it
    "model.safetensors": lambda p: p.write_bytes(
        p.read_bytes()[: p.stat().st_size // 2]
    ),  # truncated
    "optimizer.pt": lambda p: p.write_bytes(b"junk junk junk\n"),
    "meta.json": lambda p: p.write_text('{"step": 1, "learn'),
    "meta.json:list": lambda p: p.write_text("[1]"),
    "rng.pt": lambda p: p.write_bytes(b"\x00" * 64),
    "value_head.pt": lambda p: p.write_bytes(p.read_bytes()[:100]),
    "optimizer.pt:missing": lambda p: p.unlink(),
    "optimizer.pt:truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_file_is_a_one_line_error_naming_it_and_nothing_is_restored(
    tmp_path, tok, damage
):
    from agents.models import load_model as load_named

    cfg = LearnerConfig(lr=1e-3, value_coef=0.5)
    learner = Learner(tiny_llama(0)[0], tok, cfg)
    folder = checkpoint.save(tmp_path, learner, 1, config={"model": "tiny-llama"})
    name = damage.split(":")[0]
    DAMAGE[damage](folder / name)
    other = Learner(tiny_llama(5)[0], tok, cfg)
    before = {k: v.clone() for k, v in other.model.state_dict().items()}
    with pytest.raises(checkpoint.DamagedCheckpoint) as e:
        checkpoint.load(tmp_path, other)
    assert str(folder / name) in str(e.value) or f"checkpoint {folder}: {name} is missing" in str(
        e.value
    )
    assert "\n" not in str(e.value) and isinstance(e.value, ValueError)
    assert (
        all(torch.equal(before[k], v) for k, v in other.model.state_dict().items())
        and other.step_count == 0
    )
    if name in ("model.safetensors", "meta.json"):  # the files a player (llm:RUN_DIR) reads
        with pytest.raises(ValueError, match=f"checkpoint file {folder / name} is damaged"):
            load_named(str(tmp_path))


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_resume_point_is_the_newest_checkpoint_whose_files_all_read_whatever_latest_names(
    tmp_path, tok, damage
):
    from training.league import League

    learner = Learner(tiny_llama(0)[0], tok, LearnerConfig(lr=1e-3, value_coef=0.5))
    for step in (1, 2):
        checkpoint.save(
            tmp_path,
            learner,
            step,
            config={"model": "tiny-llama"},
            league=League().state_dict(),
            state={"advantage": {}, "elapsed": 1.0, "games": 2},
        )
    assert checkpoint.resume_point(tmp_path) == (tmp_path / "step_00000002", [])
    name = damage.split(":")[0]
    DAMAGE[damage](tmp_path / "step_00000002" / name)
    folder, skipped = checkpoint.resume_point(tmp_path)
    assert folder == tmp_path / "step_00000001" and [p for p, _ in skipped] == [
        tmp_path / "step_00000002"
    ]
    assert str(tmp_path / "step_00000002" / name) in str(
        skipped[0][1]
    ) or f"{name} is missing" in str(skipped[0][1])
    assert checkpoint.latest(tmp_path) == tmp_path / "step_00000002"  # what the pointer names


@pytest.mark.parametrize("damage", ["model.safetensors", "optimizer.pt:missing", "folder removed"])
def test_a_run_dir_plays_its_newest_intact_checkpoint_when_latest_names_a_damaged_or_missing_one(
    tmp_path, tok, damage, capsys
):
    from agents.models import find_checkpoint
    from agents.models import load_model as load_named

    ckpts = tmp_path / "run" / "checkpoints"
    learner = Learner(tiny_llama(0)[0], tok, LearnerConfig(lr=1e-2))
    weights = {}
    for step in (1, 2):
        learner.step(
            make_batches(tok)[0][:2]
            if step == 1
            else [
                TrainingSequence(s.prompt_ids, s.completion_ids, 1.0) for s in make_batches(tok)[1]
            ]
        )
        checkpoint.save(
            ckpts,
            learner,
            step,
            config={"model": "tiny-llama"},
            league=League().state_dict(),
            state={"advantage": {}, "elapsed": 1.0, "games": 2},
            keep=0,
        )
        weights[step] = {k: v.clone() for k, v in learner.model.state_dict().items()}
    newest = ckpts / "step_00000002"
    assert find_checkpoint(str(tmp_path / "run")) == newest  # all intact: the newest
    if damage == "folder removed":
        import shutil

        shutil.rmtree(newest)
    else:
        DAMAGE[damage](newest / damage.split(":")[0])
    assert (ckpts / "latest").read_text().strip() == newest.name  # the pointer still names it
    for name in (tmp_path / "run", ckpts):
        assert (
            find_checkpoint(str(name))
            == ckpts / "step_00000001"
            == checkpoint.resume_point(ckpts)[0]
        )
    model, _ = load_named(str(tmp_path / "run"), dtype="float32")
    assert all(torch.equal(v, weights[1][k]) for k, v in model.state_dict().items())
    assert not any(
        torch.equal(weights[1][k], weights[2][k]) for k in weights[1] if k.endswith("q_proj.weight")
    )
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning")]
    assert len(warnings) == (damage != "folder removed") and all(
        "step_00000002" in w for w in warnings
    )  # once, not per lookup


def test_a_run_dir_without_an_intact_checkpoint_is_a_one_line_error(tmp_path, tok):
    from agents.models import find_checkpoint

    learner = Learner(tiny_llama(0)[0], tok, LearnerConfig())
    folder = checkpoint.save(
        tmp_path / "checkpoints",
        learner,
        1,
        config={"model": "tiny-llama"},
        league=League().state_dict(),
        state={"advantage": {}, "elapsed": 1.0, "games": 2},
    )
    DAMAGE["rng.pt"](folder / "rng.pt")
    with pytest.raises(checkpoint.DamagedCheckpoint) as e:
        find_checkpoint(str(tmp_path))
    assert str(e.value).startswith(f"no intact checkpoint in {tmp_path / 'checkpoints'}") and str(
        folder / "rng.pt"
    ) in str(e.value)
    assert "\n" not in str(e.value)


def test_latest_survives_a_missing_or_junk_pointer(tmp_path, tok):
    learner = Learner(tiny_llama(0)[0], tok, LearnerConfig())
    for step in (1, 2):
        checkpoint.save(tmp_path, learner, step, keep=0)
    (tmp_path / "latest").write_bytes(b"\xff\xfe junk")
    assert checkpoint.latest(tmp_path).name == "step_00000002"
    (tmp_path / "latest").unlink()
    assert checkpoint.latest(tmp_path).name == "step_00000002"
    assert [p.name for p in checkpoint.checkpoints(tmp_path)] == ["step_00000002", "step_00000001"]


def test_clean_tmp_removes_what_killed_writers_left(tmp_path, tok):
    import os
    import subprocess
    import sys

    learner = Learner(tiny_llama(0)[0], tok, LearnerConfig(loss=LossConfig(kl_coef=0.1)))
    checkpoint.save(tmp_path, learner, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "latest",
        "reference.safetensors",
        "step_00000001",
    ]  # no temp names left
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = os.getppid()
    for name in (
        f".tmp-step_00000002-{dead.pid}",
        f".old-step_00000001-{dead.pid}",
        f".tmp-step_00000003-{os.getpid()}",
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"x" * 1000)
    (tmp_path / f".tmp-latest-{dead.pid}").write_text("step_00000002\n")
    (tmp_path / f".tmp-step_00000004-{live}").mkdir()  # another live process's save in progress
    removed = checkpoint.clean_tmp(tmp_path)
    assert len(removed) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f".tmp-step_00000004-{live}",
        "latest",
        "reference.safetensors",
        "step_00000001",
    ]
    assert checkpoint.clean_tmp(tmp_path / "absent") == []


def test_latest_precision_is_the_latest_checkpoints_and_none_without_one(tmp_path):
    for step, precision in ((100, "float32"), (200, "bfloat16")):
        folder = tmp_path / "checkpoints" / f"step_{step:08d}"
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text(json.dumps({"step": step, "precision": precision}))
    assert checkpoint.latest_precision(tmp_path / "checkpoints") == "bfloat16"
    assert checkpoint.latest_precision(tmp_path / "no-run" / "checkpoints") is None
