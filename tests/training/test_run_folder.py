"""A run's folder (`training.run_folder`): runs never mix, resumes skip damaged checkpoints and torn lines, the time budget, best/ never from replayed steps, unwritable and full folders, the lr horizon on resume."""

import contextlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from agents import checkpoint
from cli.main import main as cli_main
from tests.tiny_run import merged, quiet, tiny
from training import selfplay
from training.selfplay import train

SMALL = {
    "steps": 2,
    "matches_per_step": 4,
    "concurrency": 4,
    "checkpoint_every": 2,
    "threads": 1,
    "eval": {"every": 2, "games": 2},
    "league": {"self_play": 0.5, "bots": ["random"], "snapshot_every": 0},
}


def recording():
    from rich.console import Console

    return Console(file=io.StringIO(), width=1000)


def steps_in(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def killed_run(tmp_path, name, monkeypatch):
    """A run interrupted while it writes its first checkpoint (step 2): logs of steps 1-2, no checkpoint."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    cfg = tiny(tmp_path, name, **SMALL)
    with monkeypatch.context() as m:
        m.setattr(checkpoint, "save", interrupted)
        with pytest.raises(KeyboardInterrupt):
            train(cfg, console=quiet())
    run = Path(cfg.run_dir)
    assert steps_in(run / "metrics.jsonl") == [1, 2] and steps_in(run / "eval.jsonl") == [0, 2]
    assert not checkpoint.checkpoints(run / "checkpoints")
    return cfg


def test_a_run_killed_before_its_first_checkpoint_never_mixes_with_the_next(tmp_path, monkeypatch):
    cfg = killed_run(tmp_path, "a", monkeypatch)
    run = Path(cfg.run_dir)
    shutil.copytree(run, tmp_path / "b")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = (
        run / "checkpoints" / f".tmp-step_00000002-{dead.pid}"
    )  # what a save killed mid-write leaves
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"x" * 1000)
    (run / "league").mkdir()
    (run / "league" / f".tmp-step_00000003.safetensors-{dead.pid}").write_bytes(b"x" * 1000)
    busy = run / f".tmp-best-{os.getppid()}"  # a live process's: left alone
    busy.mkdir()

    console = recording()
    train(cfg, console=console)  # a fresh start in the used folder
    old = [p for p in run.iterdir() if p.name.startswith("old-")]
    assert len(old) == 1 and f"moved them to {old[0]}" in console.file.getvalue()
    assert steps_in(old[0] / "metrics.jsonl") == [1, 2] and steps_in(old[0] / "eval.jsonl") == [
        0,
        2,
    ]
    assert steps_in(run / "metrics.jsonl") == [1, 2] and steps_in(run / "eval.jsonl") == [0, 2]
    assert not list(run.glob("*/.tmp-*")) and not list(old[0].glob("*/.tmp-*")) and busy.is_dir()

    console = recording()
    train(
        tiny(tmp_path, "b", **SMALL), resume=True, console=console
    )  # --resume, but nothing to resume from
    out = console.file.getvalue()
    assert (
        f"--resume: no checkpoint in {tmp_path / 'b' / 'checkpoints'}; starting fresh" in out
        and "moved them to" in out
    )
    assert (
        steps_in(tmp_path / "b" / "metrics.jsonl") == [1, 2]
        and checkpoint.latest(tmp_path / "b" / "checkpoints").name == "step_00000002"
    )


def test_resume_falls_back_past_a_damaged_checkpoint_and_a_torn_log_line(tmp_path, capsys):
    cfg = tiny(
        tmp_path,
        **{
            **SMALL,
            "steps": 3,
            "checkpoint_every": 1,
            "keep_checkpoints": 3,
            "eval": {"every": 1, "games": 2},
        },
    )
    train(cfg, console=quiet())
    run = Path(cfg.run_dir)
    first = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "checkpoints" / "step_00000003" / "optimizer.pt").write_bytes(b"junk junk junk\n")
    for name in ("metrics.jsonl", "eval.jsonl"):
        with open(run / name, "a") as f:
            f.write('{"step": 4, "rew')  # a writer killed mid-line

    console = recording()
    train(cfg, resume=True, console=console)
    out = console.file.getvalue()
    damaged = run / "checkpoints" / "step_00000003" / "optimizer.pt"
    assert (
        f"skipped checkpoint step_00000003: checkpoint file {damaged} is damaged" in out
        and "resuming from step_00000002" in out
    )
    assert (
        run / "checkpoints" / "damaged-step_00000003" / "optimizer.pt"
    ).read_bytes() == b"junk junk junk\n"
    again = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in again] == [1, 2, 3] and steps_in(run / "eval.jsonl") == [0, 1, 2, 3]
    assert (again[2]["reward"], again[2]["loss"]) == (
        first[2]["reward"],
        first[2]["loss"],
    )  # step 3 played again, exactly

    for folder in checkpoint.checkpoints(run / "checkpoints"):
        (folder / "meta.json").write_text("junk")
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**merged(SMALL), "run_dir": str(run)}))
    assert cli_main(["train", str(path), "--resume"]) == 2
    err = capsys.readouterr().err
    assert (
        f"error: --resume: no intact checkpoint in {run / 'checkpoints'}: checkpoint file" in err
        and "meta.json is damaged" in err
    )
    assert err.count("\n") == 1


class Clock:
    """selfplay's clock (as `selfplay.time`): 1 ms per reading, plus what a scripted evaluation takes."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1e-3
        return self.now

    strftime = staticmethod(time.strftime)


def scripted_evaluation(monkeypatch, scores: dict, clock: Clock | None = None, slow: tuple = ()):
    """selfplay.evaluate replaced: no rows, selection score `scores[step]`; a step in `slow` takes 61 s on `clock`."""

    def evaluate(ev, agent, matches, backend, step):
        if step in slow:
            clock.now += 61
        return [], scores.get(step, 0.0)

    monkeypatch.setattr(selfplay, "evaluate", evaluate)
    if clock is not None:
        monkeypatch.setattr(selfplay, "time", clock)


def test_a_run_stopped_by_its_time_budget_resumes_to_no_step_and_an_earlier_checkpoint_as_the_unbroken_run(
    tmp_path, monkeypatch
):
    # max_minutes 1; the evaluation of step 2 takes 61 s: the unbroken run checks the budget after step 3's
    # training, so it stops at step 3 (evaluation and checkpoint), not at step 2
    scripted_evaluation(monkeypatch, {}, Clock(), slow=(2,))
    over = {**SMALL, "steps": 4, "max_minutes": 1}
    train(tiny(tmp_path, "straight", **over), console=quiet())
    run = tmp_path / "straight"
    assert (
        steps_in(run / "metrics.jsonl") == [1, 2, 3]
        and checkpoint.latest(run / "checkpoints").name == "step_00000003"
    )
    assert (
        checkpoint.finished(run, 4, 1)
        and not checkpoint.finished(run, 4, 0)
        and checkpoint.finished(run, 3, 0)
    )
    console = recording()
    out = train(
        tiny(tmp_path, "straight", **over), resume=True, console=console
    )  # its budget is spent: no step 4
    assert (
        "time budget spent: max_minutes 1 was reached at step 3; no step trained"
        in console.file.getvalue()
    )
    assert (
        out["step"] == 3
        and steps_in(run / "metrics.jsonl") == [1, 2, 3]
        and checkpoint.latest(run / "checkpoints").name == "step_00000003"
    )
    # stopped at step 2 (steps: 2) with 61 s spent by its evaluation, then resumed with steps 4: the budget was
    # checked at 0 s at step 2, so step 3 is trained, as in the unbroken run
    scripted_evaluation(monkeypatch, {}, Clock(), slow=(2,))
    train(tiny(tmp_path, "split", **{**over, "steps": 2}), console=quiet())
    assert not checkpoint.finished(tmp_path / "split", 4, 1)
    train(tiny(tmp_path, "split", **over), resume=True, console=quiet())
    assert steps_in(tmp_path / "split" / "metrics.jsonl") == [1, 2, 3]
    assert checkpoint.latest(tmp_path / "split" / "checkpoints").name == "step_00000003"


def test_best_is_never_from_steps_a_resume_replays(tmp_path, monkeypatch):
    # evaluation every step; checkpoint every 2. Killed while writing checkpoint 4, after step 3's new best (0.9):
    # the resume from checkpoint 2 replays steps 3-4, here without a better score (another machine, say), so
    # best/ must stay step 2's policy, not hold step 3's from the abandoned run
    real_save = checkpoint.save

    def killed_at_4(*args, **kwargs):
        if args[2] == 4:
            raise KeyboardInterrupt
        return real_save(*args, **kwargs)

    cfg = tiny(tmp_path, **{**SMALL, "steps": 4, "eval": {"every": 1}})
    run = Path(cfg.run_dir)
    scripted_evaluation(monkeypatch, {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.9, 4: 0.4})
    with monkeypatch.context() as m:
        m.setattr(checkpoint, "save", killed_at_4)
        with pytest.raises(KeyboardInterrupt):
            train(cfg, console=quiet())
    assert (
        checkpoint.read_meta(run / "best")["step"] == 2
    )  # the checkpoint's best; step 3's waits for checkpoint 4
    scripted_evaluation(monkeypatch, {3: 0.25, 4: 0.28})
    console = recording()
    out = train(cfg, resume=True, console=console)
    assert (
        "dropped best-pending/ from step 3, after checkpoint 2: those steps are replayed"
        in console.file.getvalue()
    )
    best = checkpoint.read_meta(run / "best")
    assert (
        best["step"] == 2
        and best["selection_score"] == out["best"] == 0.3
        and not (run / "best-pending").exists()
    )
    # a new best after the resume becomes best/ at the next checkpoint
    scripted_evaluation(monkeypatch, {5: 0.5, 6: 0.6})
    train(
        tiny(tmp_path, **{**SMALL, "steps": 6, "eval": {"every": 1}}), resume=True, console=quiet()
    )
    best = checkpoint.read_meta(run / "best")
    assert best["step"] == 6 and best["selection_score"] == 0.6


@contextlib.contextmanager
def unwritable(folder: Path):
    """A folder nobody can write to: chmod a-w, and as root (whom chmod does not stop) the immutable attribute."""
    as_root = os.geteuid() == 0
    folder.chmod(0o555)
    if (
        as_root
        and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0
    ):
        folder.chmod(0o755)
        pytest.skip(
            "root on a filesystem without chattr +i: no way to make a folder unwritable here"
        )
    try:
        yield
    finally:
        if as_root:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


def test_a_read_only_run_folder_is_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        selfplay,
        "load_model",
        lambda *a, **k: pytest.fail("loaded a model for an unwritable run folder"),
    )
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with unwritable(run):
        for cfg, where in [
            (tiny(tmp_path, "run"), run),
            (tiny(run, "new"), run),
        ]:  # run/new cannot be made in run
            for resume in (False, True):
                with pytest.raises(ValueError) as e:
                    train(cfg, resume=resume, console=quiet())
                assert str(e.value).startswith(f"cannot write to {where} (") and "\n" not in str(
                    e.value
                )
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(merged({})))
        assert cli_main(["train", str(path), "--out", str(run)]) == 2
        err = capsys.readouterr().err
        assert (
            err.startswith(f"arena train: error: cannot write to {run} (") and err.count("\n") == 1
        )
    with unwritable(run / "checkpoints"):
        with pytest.raises(ValueError, match=f"cannot write to {run / 'checkpoints'} "):
            train(tiny(tmp_path, "run"), console=quiet())


def test_a_resume_keeps_the_lr_schedules_horizon_and_says_where_it_stops(
    tmp_path, capsys, monkeypatch
):
    """Train 2 steps of a cosine schedule, then --resume --steps 4: the schedule keeps its horizon
    (step 2) and steps 3-4 run at its floor; the resume says so. An explicit learner.total_steps
    replaces the horizon, with a warning."""
    path = tmp_path / "tiny.yaml"
    over = {
        **SMALL,
        "eval": {"every": 0},
        "learner": {"lr": 1e-3, "lr_schedule": "cosine", "min_lr_ratio": 0.1},
    }
    path.write_text(yaml.safe_dump(merged(over)))

    def lrs(run: Path) -> list[float]:
        return [json.loads(line)["lr"] for line in (run / "metrics.jsonl").read_text().splitlines()]

    for name in ("kept", "given"):
        run = str(tmp_path / name)
        assert cli_main(["train", str(path), "--steps", "2", "--out", run]) == 0
    out = capsys.readouterr().out
    assert "steps 0->2; lr cosine to step 2 (learner.total_steps 2)" in out
    assert (
        cli_main(["train", str(path), "--steps", "4", "--out", str(tmp_path / "kept"), "--resume"])
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "at step 2 (" in out
        and "this run stops at step 4; lr cosine to step 2 (learner.total_steps 2) as the run "
        "started, then at its floor 0.0001"
        in out
    )
    assert lrs(tmp_path / "kept") == pytest.approx([1e-3, 5.5e-4, 1e-4, 1e-4])
    argv = ["train", str(path), "--steps", "4", "--out", str(tmp_path / "given"), "--resume"]
    assert cli_main([*argv, "--set", "learner.total_steps=4"]) == 0
    out = capsys.readouterr().out
    assert (
        "warning: learner.total_steps 4 replaces the lr schedule's horizon this run started with (2)"
        in out
    )
    assert "this run stops at step 4; lr cosine to step 4 (learner.total_steps 4)" in out
    assert lrs(tmp_path / "given")[2] == pytest.approx(
        1e-4 + 9e-4 * 0.5 * (1 + math.cos(math.pi / 2))
    )

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(selfplay, "train", ctrl_c)  # Ctrl-C says what is kept and how to go on
    assert cli_main(argv) == 130
    assert capsys.readouterr().err == (
        f"arena train: interrupted: the checkpoints up to step_00000004 are kept in "
        f"{tmp_path / 'given' / 'checkpoints'}; run the same command with --resume to go on\n"
    )


def test_a_full_disk_at_a_checkpoint_is_one_line_and_keeps_the_checkpoints_before(tmp_path):
    """A write that fails for want of space (here a real file-size limit, RLIMIT_FSIZE, on the
    `arena train` process: the same error path as ENOSPC) ends the run with one line that says
    how to go on; the half-written checkpoint is gone and the one before it still resumes."""
    import resource
    import signal

    path, run = tmp_path / "tiny.yaml", tmp_path / "run"
    path.write_text(yaml.safe_dump(merged({"steps": 1, "threads": 1, "eval": {"every": 0}})))
    assert cli_main(["train", str(path), "--out", str(run)]) == 0
    first = checkpoint.latest(run / "checkpoints")
    assert first.name == "step_00000001" and (first / "model.safetensors").stat().st_size > 2**20

    def small_files_only():  # in the child: files up to 1 MiB (metrics, meta.json, plots), not a model
        signal.signal(
            signal.SIGXFSZ, signal.SIG_IGN
        )  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (2**20, 2**20))

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "train",
            str(path),
            "--out",
            str(run),
            "--steps",
            "2",
            "--resume",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=small_files_only,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("arena train: error: could not write "), done.stderr
    assert "File too large" in err[0] and err[0].endswith(
        "(the checkpoints written before are intact: fix this, then add --resume)"
    )
    assert checkpoint.latest(run / "checkpoints") == first and sorted(
        p.name for p in (run / "checkpoints").iterdir()
    ) == ["latest", first.name]
    assert not [p for p in run.rglob("*") if ".tmp" in p.name]  # nothing half-written left behind
    assert (
        cli_main(["train", str(path), "--out", str(run), "--steps", "2", "--resume"]) == 0
    )  # room again: it goes on
    assert checkpoint.latest(run / "checkpoints").name == "step_00000002"


def test_a_second_process_training_into_a_held_run_folder_is_refused_before_the_model_loads(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(
        selfplay,
        "load_model",
        lambda *a, **k: pytest.fail("loaded a model for a run folder another process holds"),
    )
    run = tmp_path / "run"
    run.mkdir()
    holder = holding(run)
    try:
        assert holder.stdout.readline().strip() == "held"
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(merged({})))
        assert cli_main(["train", str(path), "--out", str(run)]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"arena train: error: {run} is in use by another training process (pid {holder.pid}): "
            "wait for it to end, or choose another run_dir (--out)\n"
        )
        assert not (run / "config.yaml").exists()  # nothing of the held run's was touched
    finally:
        holder.kill()  # a killed holder frees the folder: the system drops its lock
        holder.wait()
    monkeypatch.undo()
    train(tiny(tmp_path, "run"), console=quiet())
    assert steps_in(run / "metrics.jsonl")
    again = holding(run)  # the finished run let go of its folder, though this process lives on
    try:
        assert again.stdout.readline().strip() == "held"
    finally:
        again.kill()
        again.wait()


def holding(run: Path) -> subprocess.Popen:
    """A process that holds `run` (`hold_run_dir`), prints "held" once it does, then sleeps."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from training.run_folder import hold_run_dir; "
            "hold_run_dir(Path(sys.argv[1])); print('held', flush=True); time.sleep(120)",
            str(run),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
