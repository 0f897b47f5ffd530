"""bench/gpu_check.py end to end on the CPU (`--dry-run`): every part runs at tiny shapes and
the table's JSON has every row, so the script a GPU machine runs cannot rot."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_dry_run_writes_every_row(tmp_path):
    out = tmp_path / "check.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--dry-run", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["ceiling"]["bfloat16"] > 0 and result["ceiling"]["float32"] > 0
    rows = result["rows"]
    shapes = ["SmolLM2-135M", "Qwen3-1.7B", "Qwen3-4B"]
    rollout = [(r["shape"], r["setting"]) for r in rows if r["part"] == "rollout"]
    assert rollout == [(s, f"{n} live") for s in shapes for n in (1, 2, 4)]
    assert all(r["tokens_per_s"] > 0 and r["mfu"] > 0 for r in rows if r["part"] == "rollout")
    learner = [r for r in rows if r["part"] == "learner"]
    assert [r["shape"] for r in learner if r["setting"] == "resident"] == shapes
    assert {r["setting"] for r in learner} >= {"resident", "offload + checkpointing"}
    for r in learner:  # measured (profiler) and planned peaks, side by side
        assert r["peak_gib"] > 0 and r["predicted_gib"] > 0 and r["tokens_per_s"] > 0
    (selfplay,) = [r for r in rows if r["part"] == "selfplay"]
    assert len(selfplay["curve"]) == 1 and list(selfplay["cpu_curves"]) == ["1"]
    assert isinstance(selfplay["within"], bool)
    (paper,) = [r for r in rows if r["part"] == "paper config"]
    assert paper["peak_gib"] > 0
    table = proc.stdout
    for part in ("rollout", "learner", "selfplay", "paper config"):
        assert part in table


def test_parts_past_the_deadline_are_rows_that_say_so(tmp_path):
    """`--deadline-minutes`: a part not begun by then is a row saying it was skipped, and the
    JSON is still written (a run cut short keeps what it measured)."""
    out = tmp_path / "check.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--dry-run", "--out", str(out)]
    cmd += ["--parts", "learner,selfplay", "--shapes", "SmolLM2-135M", "--deadline-minutes", "1e-6"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["part"], r["setting"]) for r in rows] == [
        ("learner", "resident"),
        ("learner", "resident + shared prefix"),
        ("learner", "offload + checkpointing"),
        ("learner", "offload + checkpointing + shared prefix"),
        ("selfplay", ""),
    ]
    assert all(r["note"].startswith("skipped: not begun by") for r in rows)
    bad = subprocess.run(
        cmd[:-4] + ["--shapes", "Qwen3-8B"], capture_output=True, text=True, env=env
    )
    assert bad.returncode != 0 and "unknown shape or setting Qwen3-8B" in bad.stderr
