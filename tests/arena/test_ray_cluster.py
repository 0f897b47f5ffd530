"""Matches on a real multi-node Ray cluster on one machine (`ray.cluster_utils.Cluster`: a head
and a worker node, separate raylet processes): the stored results equal the local run's,
and a worker killed (its process, or its whole node) mid-tournament loses and duplicates
nothing. Slow (~1-2 min): `pytest -m ray tests/arena/test_ray*.py tests/training/test_ray_training.py`."""

import functools
import os
import signal
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from agents.by_game import build_agent  # noqa: E402
from arena.ray_runner import RayPool, build_players  # noqa: E402
from core.records import read_jsonl  # noqa: E402
from tournaments.config import load_config  # noqa: E402
from tournaments.matches import arena_play_matches  # noqa: E402
from tournaments.run import run_tournament  # noqa: E402
from tournaments.store import Store  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

CONFIG = load_config(
    {
        "name": "cluster test",
        "format": "round_robin",
        "players": {
            "random": "random",
            "expert": {"by_game": {"tic_tac_toe": "mcts:25", "kuhn_poker": "cfr"}},
            "random2": {"type": "random"},
            "mixed": {"by_game": {"kuhn_poker": "cfr", "default": "mcts:5"}},
        },
        "games": ["tic_tac_toe", "kuhn_poker"],
        "games_per_pairing": 8,
        "seed": 11,
    }
)


@pytest.fixture(scope="module")
def cluster():
    """A head node with 2 CPUs (each test adds a worker node); node death is noticed within ~1.5 s."""
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "include_dashboard": False,
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3},
        },
    )
    ray.init(address=c.address, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def stored(db: Path) -> dict:
    with Store(db, readonly=True) as store:
        return {k: (r.scores, r.outcome, r.error) for k, r in store.results().items()}


def run(db: Path, pool=None, on_result=None):
    agents = {} if pool else {n: build_agent(n, s) for n, s in CONFIG.players.items()}
    jsonl = db.with_suffix(".jsonl")
    return run_tournament(
        CONFIG,
        arena_play_matches(agents, jsonl, 4, 2000, pool=pool),
        db,
        jsonl,
        on_result=on_result,
    )


def check_against_local(tmp_path: Path, name: str) -> None:
    run(tmp_path / "local.db")
    assert stored(tmp_path / f"{name}.db") == stored(tmp_path / "local.db")
    ids = [r.match_id for r in read_jsonl(tmp_path / f"{name}.jsonl")]
    assert (
        sorted(ids) == sorted(set(ids)) == sorted(stored(tmp_path / "local.db"))
    )  # each match once, none missing


def pool_on_two_nodes(cluster) -> RayPool:
    node = cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    pool = RayPool.start(
        cluster.address, functools.partial(build_players, CONFIG.players), workers=2
    )
    nodes = ray.get([w.node.remote() for w in pool.workers])
    assert len(set(nodes)) == 2 and node.node_id in nodes  # SPREAD: one worker per node
    return pool, node


def test_a_two_node_cluster_stores_what_the_local_run_stores(cluster, tmp_path):
    pool, node = pool_on_two_nodes(cluster)
    try:
        result = run(tmp_path / "ray.db", pool)
    finally:
        pool.shutdown()
        cluster.remove_node(node)
    assert result.played == len(result.schedule) == 6 * 8 * 2
    check_against_local(tmp_path, "ray")


def test_a_worker_process_killed_mid_tournament_loses_and_duplicates_nothing(cluster, tmp_path):
    pool, node = pool_on_two_nodes(cluster)
    pids = pool.worker_pids()
    killed = []

    def kill_once(result):
        if not killed:
            os.kill(pids[0], signal.SIGKILL)
            killed.append(result.match_id)

    try:
        result = run(tmp_path / "killed.db", pool, on_result=kill_once)
    finally:
        pool.shutdown()
        cluster.remove_node(node)
    assert killed and pool.retried >= 1  # the dead worker's chunks were played again
    assert result.played == len(result.schedule)
    check_against_local(tmp_path, "killed")


def test_a_node_removed_mid_tournament_loses_and_duplicates_nothing(cluster, tmp_path):
    pool, node = pool_on_two_nodes(cluster)
    removed = []

    def remove_once(result):
        if not removed:
            cluster.remove_node(node)  # its worker dies; it restarts on the head (a CPU free there)
            removed.append(result.match_id)

    try:
        result = run(tmp_path / "removed.db", pool, on_result=remove_once)
    finally:
        pool.shutdown()
    assert removed and pool.retried >= 1
    assert result.played == len(result.schedule)
    check_against_local(tmp_path, "removed")
