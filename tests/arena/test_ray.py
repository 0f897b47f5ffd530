"""Matches on Ray (`arena.ray_runner`) on a real local Ray instance with 2 CPUs and 2 match
workers. The first test runs in the default suite (~20 s); all: `pytest -m ray tests/arena/test_ray*.py tests/training/test_ray_training.py`
(the multi-node and kill-a-worker tests are in test_ray_cluster.py)."""

import functools
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from agents.by_game import build_agent  # noqa: E402
from arena.ray_runner import RayPool, build_players, check_reachable  # noqa: E402
from arena.runner import plan_matches, play  # noqa: E402
from core.records import read_jsonl  # noqa: E402
from tournaments.config import load_config  # noqa: E402
from tournaments.matches import arena_play_matches  # noqa: E402
from tournaments.run import run_tournament  # noqa: E402
from tournaments.store import Store  # noqa: E402

pytestmark = pytest.mark.ray

CONFIG = {
    "name": "ray test",
    "format": "swiss",  # adaptive: round by round
    "players": {
        "random": "random",
        "expert": {"by_game": {"tic_tac_toe": "mcts:10", "kuhn_poker": "cfr"}},
        "random2": {"type": "random"},
        "mixed": {"by_game": {"kuhn_poker": "cfr", "default": "random"}},
    },
    "games": ["tic_tac_toe", "kuhn_poker"],
    "games_per_pairing": 4,
    "seed": 5,
}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, log_to_driver=False
    )  # never an existing cluster
    yield
    ray.shutdown()


def stored(db: Path) -> dict:
    """What the store holds per match, without wall times and paths."""
    with Store(db, readonly=True) as store:
        return {k: (r.scores, r.outcome, r.error) for k, r in store.results().items()}


def run(config, db: Path, pool=None):
    agents = {} if pool else {n: build_agent(n, s) for n, s in config.players.items()}
    jsonl = db.with_suffix(".jsonl")
    return run_tournament(config, arena_play_matches(agents, jsonl, 8, 2000, pool=pool), db, jsonl)


def test_an_address_where_no_ray_listens_is_a_one_line_error_at_once():
    import socket

    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(
        RuntimeError,
        match=rf"^cannot reach the Ray cluster at 127.0.0.1:{port} \(Connection refused\); start it with",
    ):
        check_reachable(f"127.0.0.1:{port}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_reachable(f"127.0.0.1:{s.getsockname()[1]}")  # something listens: no error


def test_a_swiss_tournament_on_two_ray_workers_stores_what_the_local_run_stores(
    local_ray, tmp_path
):
    config = load_config(CONFIG)
    local = run(config, tmp_path / "local.db")
    pool = RayPool.start("local", functools.partial(build_players, config.players), workers=2)
    try:
        assert len(set(pool.worker_pids())) == 2
        on_ray = run(config, tmp_path / "ray.db", pool)
    finally:
        pool.shutdown()
    assert on_ray.played == local.played == len(local.schedule) > 0
    assert stored(tmp_path / "ray.db") == stored(tmp_path / "local.db")
    assert [s.match_id for s in on_ray.schedule] == [
        s.match_id for s in local.schedule
    ]  # same Swiss pairings, round by round
    ids = [r.match_id for r in read_jsonl(tmp_path / "ray.jsonl")]
    assert (
        sorted(ids) == sorted(set(ids)) == sorted(stored(tmp_path / "ray.db"))
    )  # the driver wrote each match once


@pytest.mark.slow  # one Ray test stays in the default suite (the one above)
def test_a_match_id_is_yielded_once_whatever_comes_back(local_ray, tmp_path):
    plans = plan_matches("tic_tac_toe", ["random", "random2"], 6, seed=1)
    pool = RayPool.start(
        "local",
        functools.partial(build_players, {"random": "random", "random2": "random"}),
        workers=2,
    )
    try:
        records = list(
            pool.play(plans + plans[:2], concurrency=2, out=str(tmp_path / "r.jsonl"))
        )  # two ids come back twice
    finally:
        pool.shutdown()
    assert sorted(r.match_id for r in records) == [p.match_id for p in plans] and pool.dropped == 2
    assert [r.match_id for r in read_jsonl(tmp_path / "r.jsonl")] == [r.match_id for r in records]
    agents = {n: build_agent(n, "random") for n in ("random", "random2")}
    local = {r.match_id: r.returns for r in play(plans, agents)}
    assert {r.match_id: r.returns for r in records} == local


@pytest.mark.slow
def test_an_agent_that_cannot_be_built_is_a_one_line_error(local_ray):
    with pytest.raises(
        RuntimeError, match="could not build its agents: ValueError: unknown agent 'bogus'"
    ):
        RayPool.start(
            "local", functools.partial(build_players, {"a": "random", "b": "bogus"}), workers=1
        )


@pytest.mark.slow
def test_eval_and_play_with_ray_replay_a_sampling_llm_move_for_move(local_ray, tmp_path, capsys):
    """`arena eval --ray` / `arena play --ray`: the tiny model sampling at temperature 1 on two
    workers (other processes, other batches) plays exactly the moves it plays locally."""
    from cli.main import main as arena_main

    agent = "tiny-llama,constrained=true,temperature=1.0,max_new_tokens=8"
    common = [
        "--agent",
        agent,
        "--games",
        "tic_tac_toe",
        "kuhn_poker",
        "--opponents",
        "random",
        "--matches",
        "4",
        "--threads",
        "1",
    ]
    assert arena_main(["eval", *common, "--out", str(tmp_path / "local")]) == 0
    assert (
        arena_main(
            [
                "eval",
                *common,
                "--out",
                str(tmp_path / "ray"),
                "--ray",
                "local",
                "--ray-workers",
                "2",
            ]
        )
        == 0
    )
    assert "ray: 2 worker(s) at local" in capsys.readouterr().out

    def moves(path):
        return {r.match_id: [t.move for t in r.turns] for r in read_jsonl(path)}

    local = moves(tmp_path / "local" / "eval.jsonl")
    assert len(local) == 8 and moves(tmp_path / "ray" / "eval.jsonl") == local
    play = ["play", "tic_tac_toe", "--agents", agent, "random", "--matches", "6", "--threads", "1"]
    assert arena_main([*play, "--out", str(tmp_path / "local.jsonl")]) == 0
    assert arena_main([*play, "--out", str(tmp_path / "ray.jsonl"), "--ray", "local"]) == 0
    assert moves(tmp_path / "ray.jsonl") == moves(tmp_path / "local.jsonl")
    assert len({tuple(m) for m in moves(tmp_path / "local.jsonl").values()}) > 1  # it samples


@pytest.mark.slow
def test_an_agent_error_on_a_worker_is_the_local_one_line_error(local_ray, tmp_path, capsys):
    import yaml

    from cli.main import main as arena_main

    cfg = {
        **CONFIG,
        "players": {"random": "random", "mcts": "mcts:5"},
    }  # MCTS cannot play Kuhn poker
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(cfg))
    assert (
        arena_main(
            [
                "tournament",
                str(tmp_path / "t.yaml"),
                "--db",
                str(tmp_path / "t.db"),
                "--ray",
                "local",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        "arena tournament: error: mcts needs a perfect-information sequential game; kuhn_poker is not (a player can use"
        in err
    )
    assert "ray::" not in err
