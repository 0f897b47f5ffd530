"""Self-play rollouts on Ray workers (`training.ray_rollouts`) on a real local cluster
(`ray.cluster_utils.Cluster`, 2 CPUs): tiny-llama training with 2 rollout workers plays the
in-process run's moves and records the policy versions; a killed driver resumes from its
checkpoint; a worker killed mid-step loses and duplicates nothing.
Slow (~2-3 min): `pytest -m ray tests/training/test_ray_training.py`."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from tests.tiny_run import merged, quiet  # noqa: E402
from training import selfplay  # noqa: E402
from training.league import League  # noqa: E402
from training.sections import Matches, PolicyModel  # noqa: E402
from training.selfplay import parse_config, train  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster():
    """A head node with 2 CPUs: this process's runs and the subprocess drivers join it."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    ray.init(address=c.address, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def config(run_dir: Path, ray_section: dict | None = None, **over) -> dict:
    """TINY, float32 everywhere, one thread, no evaluation; `ray_section` puts the rollouts on Ray."""
    d = merged(
        {"threads": 1, "eval": {"every": 0}, "learner": {"lr": 3e-3, "precision": "float32"}}
    )
    d.update(over)
    d["run_dir"] = str(run_dir)
    if ray_section is not None:
        d["ray"] = ray_section
    return d


def trained_records(d: dict, monkeypatch) -> list:
    """Every step's records, as the advantages saw them."""
    seen = []
    compute = selfplay.compute_advantages
    monkeypatch.setattr(
        selfplay,
        "compute_advantages",
        lambda records, *a, **k: (seen.extend(records), compute(records, *a, **k))[1],
    )
    train(parse_config(d), console=quiet())
    monkeypatch.undo()
    return seen


def moves(records) -> dict:
    return {
        r.match_id: ([(t.agent, t.action, t.token_ids) for t in r.turns], r.returns)
        for r in records
    }


@pytest.mark.parametrize("lora_rank", [0, 4])  # full weights published, or the adapters only
def test_two_rollout_workers_play_the_local_runs_moves_and_record_versions(
    cluster, tmp_path, monkeypatch, lora_rank
):
    learner = {"lr": 3e-3, "precision": "float32", "lora_rank": lora_rank}
    local = trained_records(
        config(tmp_path / "local", checkpoint_every=0, learner=learner), monkeypatch
    )
    on_ray = trained_records(
        config(
            tmp_path / "ray",
            {"address": cluster.address, "rollout_workers": 2},
            checkpoint_every=0,
            learner=learner,
        ),
        monkeypatch,
    )
    assert len(on_ray) == len(local) == 3 * 8
    # max_staleness 0: step t plays version t-1 (the weights after step t-1's update), in process and on Ray
    for rec in local + on_ray:
        assert rec.policy_version == int(rec.match_id[1:].split("p")[0]) - 1
    # float32, same seeds: the same moves and tokens every step (the workers batch other matches
    # together, so the behaviour logprobs agree to float32 rounding, not bit for bit)
    assert moves(on_ray) == moves(local)
    diffs = [
        abs(a - b)
        for x, y in zip(local, on_ray)
        for s, t in zip(x.turns, y.turns)
        for a, b in zip(s.logprobs, t.logprobs)
    ]
    assert diffs and max(diffs) < 1e-4


def test_max_staleness_1_plays_each_step_one_version_behind(cluster, tmp_path, monkeypatch):
    league = {"self_play": 0.5, "bots": ["random"], "snapshot_every": 0}
    records = trained_records(
        config(
            tmp_path / "stale",
            {"address": cluster.address, "rollout_workers": 2, "max_staleness": 1},
            steps=3,
            checkpoint_every=0,
            league=league,
        ),
        monkeypatch,
    )
    versions = {int(r.match_id[1:].split("p")[0]): r.policy_version for r in records}
    assert versions == {
        1: 0,
        2: 0,
        3: 1,
    }  # step 1: nothing to overlap; then the weights before the last update
    assert len({r.match_id for r in records}) == len(records) == 3 * 8


def test_a_killed_driver_resumes_from_its_checkpoint_on_the_cluster(cluster, tmp_path):
    run_dir = tmp_path / "run"
    cfg_path = tmp_path / "train.yaml"
    d = config(
        run_dir, {"address": cluster.address, "rollout_workers": 2}, steps=4, checkpoint_every=2
    )
    cfg_path.write_text(yaml.safe_dump(d))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "cli.main", "train", str(cfg_path)]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    first = run_dir / "checkpoints" / "step_00000002"
    deadline = time.time() + 240
    while not (first / "meta.json").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, "the driver ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (first / "meta.json").exists(), "the driver never wrote its first checkpoint"
    out = subprocess.run(
        [*cmd, "--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    resumed = re.search(r"resumed \S+ at step (\d+)", out.stdout)
    assert resumed and 2 <= int(resumed.group(1)) < 4 and "2 rollout worker(s)" in out.stdout
    steps = [
        json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == list(
        range(1, 5)
    )  # each step once: the killed run's steps after its checkpoint were cut and replayed
    assert (run_dir / "checkpoints" / "step_00000004" / "meta.json").exists()


def test_a_worker_killed_mid_step_loses_and_duplicates_nothing(cluster, tmp_path):
    from agents.models import load_model
    from training.learner import Learner
    from training.ray_rollouts import RayRollouts

    cfg = parse_config(
        config(
            tmp_path / "kill",
            {"address": cluster.address, "rollout_workers": 2},
            matches_per_step=16,
            concurrency=2,
        )
    )
    model, tok = load_model(cfg.model, dtype="float32")
    learner = Learner(model, tok, cfg.learner)
    league = League()
    league.add("random", "bot", "random")

    def one_step(kill: bool):
        rollouts = RayRollouts.start(
            cfg.ray, PolicyModel.of(cfg), Matches.of(cfg), cfg.league, learner, 0
        )
        pids = rollouts.pool.worker_pids()
        play = rollouts.pool.play

        def play_and_kill(
            *a, **k
        ):  # kill a worker once the first chunk is in: its queued chunks fail
            for i, rec in enumerate(play(*a, **k)):
                if kill and i == 0:
                    os.kill(pids[1], signal.SIGKILL)
                yield rec

        rollouts.pool.play = play_and_kill
        try:
            planned, records = rollouts.collect(1, league, np.random.default_rng(7))
            return planned, records, rollouts.pool.retried
        finally:
            rollouts.shutdown()

    planned, undisturbed, _ = one_step(kill=False)
    planned_k, records, retried = one_step(kill=True)
    assert retried >= 1
    ids = [r.match_id for r in records]
    assert (
        ids
        == sorted(set(ids))
        == sorted(p.match_id for p, _ in planned_k)
        == sorted(p.match_id for p, _ in planned)
    )
    assert moves(records) == moves(
        undisturbed
    )  # the replayed matches played again from their seeds
    assert {r.policy_version for r in records} == {0}


def test_per_role_adapters_on_rollout_workers_play_the_local_runs_moves(
    cluster, tmp_path, monkeypatch
):
    """Two LoRA adapters, one per seat of tic-tac-toe: the workers build both on their copy,
    load both from the published state, and each seat plays its role's: the in-process moves."""
    over = {
        "checkpoint_every": 0,
        "learner": {"lr": 3e-3, "precision": "float32", "lora_rank": 4},
        "roles": {"first": ["player_0"], "second": ["player_1"]},
        "league": {"self_play": 0.5, "bots": ["random"]},
    }
    local = trained_records(config(tmp_path / "local", **over), monkeypatch)
    on_ray = trained_records(
        config(tmp_path / "ray", {"address": cluster.address, "rollout_workers": 2}, **over),
        monkeypatch,
    )
    assert len(on_ray) == len(local) == 3 * 8
    assert moves(on_ray) == moves(local)
