"""`arena tournament CONFIG` end to end: real agents (bots and a tiny LLM doing real forward
passes) through the arena runner, a SQLite store, resume, report, and one-line errors."""

import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cli.main import main as arena_main
from core.records import read_jsonl
from tests.ctrl_c import default_sigint

ROOT = Path(__file__).resolve().parents[2]

CONFIG = {
    "name": "cli test",
    "format": "swiss",
    "players": {
        "tiny": {
            "type": "llm",
            "model": "tiny-llama",
            "max_new_tokens": 3,
            "fallback": "random",
            "max_retries": 1,
            "seed": 0,
        },
        "random": "random",
        "expert": {
            "by_game": {
                "tic_tac_toe": "mcts:20",
                "kuhn_poker": "cfr",
                "prisoners_dilemma": "tit_for_tat",
            }
        },
        "mixed": {"by_game": {"prisoners_dilemma": "always_defect", "default": "random"}},
        "random2": {"type": "random"},
    },
    "games": ["tic_tac_toe", "kuhn_poker", {"name": "prisoners_dilemma", "params": {"rounds": 3}}],
    "games_per_pairing": 2,
    "rating": {"reference": "random"},
    "arena": {"concurrency": 32},
}


def write(tmp_path, cfg, name="t.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_tournament_runs_resumes_and_reports(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cfg = write(tmp_path, CONFIG)
    assert arena_main(["tournament", str(cfg)]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "cli_test"
    db, jsonl, html = run / "tournament.db", run / "tournament.jsonl", run / "tournament.html"
    assert db.exists() and jsonl.exists() and html.exists()
    # 5 players: Swiss plays 3 rounds of 2 pairings; each pairing 2 games x 3 game types = 6 matches
    with sqlite3.connect(db) as conn:
        (stored,) = conn.execute("SELECT COUNT(*) FROM matches").fetchone()
        seats = [json.loads(s) for (s,) in conn.execute("SELECT seats FROM schedule")]
    assert stored == len(seats) == 3 * 2 * 6
    records = list(read_jsonl(jsonl))
    assert sorted(r.match_id for r in records) == sorted({r.match_id for r in records})
    assert len(records) == stored
    # the LLM really generated: token ids and logprobs from the tiny model's forward passes
    llm_turns = [t for r in records for t in r.turns if t.agent == "tiny"]
    assert llm_turns and all(
        t.messages and t.attempts and t.attempts[0].token_ids for t in llm_turns
    )
    # by_game: "expert" ran MCTS on tic-tac-toe and tit-for-tat in the dilemma (cooperates first)
    ipd_first = [
        t
        for r in records
        if r.game == "prisoners_dilemma"
        for t in r.turns[:2]
        if t.agent == "expert"
    ]
    assert ipd_first and all(t.move == "Cooperate" for t in ipd_first)
    for name in CONFIG["players"]:
        assert name in out
    assert f"{stored} match(es) played now" in out
    # the leaderboard as data, beside the report: W/D/L counted here from the records
    board = json.loads(html.with_suffix(".json").read_text())
    assert board["matches"] == stored and board["rating_reference"] == "random"
    rows = {r["player"]: r for r in board["players"]}
    assert set(rows) == set(CONFIG["players"]) and [r["rank"] for r in board["players"]] == list(
        range(1, len(rows) + 1)
    )
    for name, row in rows.items():
        outcomes = [r.outcome[seat] for r in records for seat, p in r.seats.items() if p == name]
        assert (row["wins"], row["draws"], row["losses"]) == tuple(
            outcomes.count(o) for o in ("win", "draw", "loss")
        )
    assert rows["random"]["elo"] == 1000 and set(board["first_mover_elo"]) <= {
        "tic_tac_toe",
        "kuhn_poker",
        "prisoners_dilemma",
    }

    # a rerun of a finished tournament plays nothing (and builds no agent)
    assert arena_main(["tournament", str(cfg)]) == 0
    assert "0 match(es) played now" in capsys.readouterr().out
    html.unlink()
    assert arena_main(["tournament", str(cfg), "--report-only"]) == 0
    assert html.exists()


def test_explicit_db_path(tmp_path, capsys):
    cfg = dict(
        CONFIG,
        format="anchor",
        players={"random": "random", "r2": "random", "r3": "random"},
        games=["kuhn_poker"],
        format_options={"anchor": "random"},
    )
    db = tmp_path / "elsewhere" / "mine.db"
    assert arena_main(["tournament", str(write(tmp_path, cfg)), "--db", str(db)]) == 0
    assert db.exists() and db.with_suffix(".jsonl").exists() and db.with_suffix(".html").exists()
    assert "report: " + str(db.with_suffix(".html")) in capsys.readouterr().out


def test_random_openings_start_matches_and_both_seat_orders_share_them(tmp_path):
    cfg = {
        "name": "openings",
        "format": "round_robin",
        "players": {"a": "minimax", "b": "minimax"},
        "games_per_pairing": 6,
        "seed": 3,
        "games": [{"name": "tic_tac_toe", "opening": 3}],
    }
    db = tmp_path / "opened.db"
    assert arena_main(["tournament", str(write(tmp_path, cfg)), "--db", str(db)]) == 0
    opened = {
        r.match_id: [(t.agent, t.move) for t in r.turns]
        for r in read_jsonl(db.with_suffix(".jsonl"))
    }
    # 0..3 random moves open each match, recorded as the agent "opening"
    assert len(opened) == 6 and len({tuple(m) for m in opened.values()}) > 1
    assert any(m[0][0] == "opening" for m in opened.values())
    for m in opened.values():  # the opening comes first, then only the players move
        k = sum(agent == "opening" for agent, _ in m)
        assert k <= 3 and all(agent == "opening" for agent, _ in m[:k])
    # both seat orders of a pairing (games 2m, 2m+1) open the same way
    for g in range(0, 6, 2):
        first, second = (opened[f"RR|a|b|0.tic_tac_toe|{i}"] for i in (g, g + 1))
        assert [mv for ag, mv in first if ag == "opening"] == [
            mv for ag, mv in second if ag == "opening"
        ]
    with sqlite3.connect(db) as conn:
        assert {o for (o,) in conn.execute("SELECT opening FROM schedule")} == {3}


BAD = [
    ({"format": "ladder"}, "unknown format 'ladder'"),
    ({"players": {"a": "random"}}, "at least two player"),
    ({"players": {"a": "random", "b": {"model": "x"}}}, "needs a 'type'"),
    (
        {"players": {"a": "random", "b": {"by_game": {"tic_tac_toe": "random"}}}},
        "by_game has no agent for kuhn_poker",
    ),
    ({"players": {"a|b": "random", "c": "random"}}, "without '|'"),
    ({"games": ["tic_tac_tow"]}, "tic_tac_toe"),
    ({"games": ["tic_tac_toe", "public_goods"]}, "same number of seats"),
    ({"format": "single_elimination", "games": ["public_goods"]}, "needs a game of two seats"),
    ({"arena": {"workers": 3}}, "unknown arena option 'workers'"),
    ({"games_per_pairing": 0}, "games_per_pairing must be a positive integer"),
    ({"format_options": {"best_of": 3}}, "set games_per_pairing instead"),
    ({"rating": {"reference": "nobody"}}, "rating.reference 'nobody' is not a player"),
    ({"players": {"a": "random", "b": "alphazero"}}, "unknown agent 'alphazero'"),
    ({"players": {"a": "random", "b": "mcts:5"}}, "mcts needs a perfect-information"),
    (
        {"games": [{"name": "tic_tac_toe", "opening": -1}]},
        "games[0].opening must be an integer >= 0",
    ),
    ({"games": [{"name": "tic_tac_toe", "openings": 2}]}, "unknown key 'openings'"),
    (
        {"players": {"a": "random", "b": {"checkpoints": "no/such/run"}}},
        "player 'b': no checkpoints under no/such/run",
    ),
    (
        {"players": {"a": "random", "b": {"checkpoints": "x", "type": "llm"}}},
        "no 'type' or 'model'",
    ),
    (
        {"players": {"a": "random", "b": {"checkpoints": 5}}},
        "checkpoints must name a training run's folder",
    ),
    ({"format": ["swiss"]}, "unknown format ['swiss']"),
    ({"rating": {"reference": ["a"]}}, "rating.reference ['a'] is not a player"),
    (
        {"games": [{"name": "tic_tac_toe", "params": {"foo": 1}}]},
        "tic_tac_toe has no parameter 'foo'",
    ),
    (
        {"games": [{"name": "tic_tac_toe", "params": {"board": "nonsense"}}]},
        "game 'tic_tac_toe' with params {'board': 'nonsense'}",
    ),
    (
        {
            "players": {
                "a": "random",
                "b": {"by_game": {"tic_tac_tow": "minimax", "default": "random"}},
            }
        },
        "did you mean 'tic_tac_toe'?",
    ),
    (
        {"format": "single_elimination", "format_options": {"ratings": {"a": 1, "b": 2}}},
        "used only with seeding: ratings",
    ),
    (
        {"format": "swiss", "format_options": {"seed": "abc"}},
        "format_options.seed must be an integer",
    ),
    (
        {"format": "double_elimination", "format_options": {"grand_final_reset": "maybe"}},
        "must be true or false",
    ),
    ({"players": {"a": "random", "b": "mcts:0"}}, "at least 1 simulation"),
]


@pytest.mark.parametrize("change,message", BAD)
def test_bad_config_is_a_one_line_error(tmp_path, capsys, change, message):
    cfg = {
        "name": "bad",
        "format": "round_robin",
        "players": {"a": "random", "b": "random"},
        "games": ["tic_tac_toe", "kuhn_poker"],
        **change,
    }
    code = arena_main(["tournament", str(write(tmp_path, cfg)), "--db", str(tmp_path / "b.db")])
    err = (
        capsys.readouterr().err.strip().replace("\r", "\n").splitlines()[-1]
    )  # after any progress bar
    assert code == 2
    assert err.startswith("arena tournament: error: ") and message in err, err


def test_prior_ratings_from_a_file_that_is_no_tournament(tmp_path, capsys):
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("these are not ratings\n" * 50)
    cfg = {
        "name": "bad",
        "format": "single_elimination",
        "players": {"a": "random", "b": "random"},
        "games": ["kuhn_poker"],
        "format_options": {"seeding": "ratings", "ratings": str(not_a_db)},
    }
    assert (
        arena_main(["tournament", str(write(tmp_path, cfg)), "--db", str(tmp_path / "b.db")]) == 2
    )
    assert "notes.txt is not a tournament database" in capsys.readouterr().err
    assert not (tmp_path / "b.db").exists()
    # a DB given as the store that is not SQLite is refused the same way, and left as it was
    assert (
        arena_main(
            [
                "tournament",
                str(write(tmp_path, dict(cfg, format="round_robin", format_options={}))),
                "--db",
                str(not_a_db),
            ]
        )
        == 2
    )
    assert "is not a tournament database" in capsys.readouterr().err
    assert not_a_db.read_text() == "these are not ratings\n" * 50
    assert (
        arena_main(
            [
                "tournament",
                str(write(tmp_path, dict(cfg, format="round_robin", format_options={}))),
                "--db",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "is a folder, not a tournament database file" in capsys.readouterr().err


def test_checkpoint_players_may_not_shadow_another_player(tmp_path):
    from tournaments.config import load_config

    (tmp_path / "run" / "best").mkdir(parents=True)
    (tmp_path / "run" / "best" / "model.safetensors").write_bytes(b"")
    cfg = {
        "name": "x",
        "format": "round_robin",
        "games": ["tic_tac_toe"],
        "players": {"a@best": "random", "a": {"checkpoints": str(tmp_path / "run")}},
    }
    with pytest.raises(ValueError, match="two players named 'a@best' \\(from a's checkpoints\\)"):
        load_config(cfg)
    cfg["players"] = {"a": {"checkpoints": str(tmp_path / "run"), "temperature": 0}, "b": "random"}
    assert load_config(cfg).players["a@best"] == {
        "type": "llm",
        "model": str(tmp_path / "run" / "best"),
        "temperature": 0,
    }


def test_a_bad_player_fails_before_the_store_and_leaves_no_run_folder(
    tmp_path, monkeypatch, capsys
):
    """A typo fails before the store is announced; a checkpoint that fails only as it loads (its
    weights do not fit its base model) leaves no empty runs/<name> folder either."""
    from agents import checkpoint
    from agents.models import tiny_llama
    from training.learner import Learner
    from training.learner_config import LearnerConfig

    model, tok = tiny_llama(0)  # hidden 64: not the base model its config names
    learner = Learner(model, tok, LearnerConfig(precision="float32"))
    misfit = tmp_path / "misfit"
    checkpoint.save_policy(
        misfit / "best", learner, 1, config={"model": "tiny-llama:hidden=128:heads=8"}
    )
    monkeypatch.chdir(tmp_path)
    for player, message, announced in (
        ("mtcs:50", "unknown agent 'mtcs'; did you mean mcts?", False),
        ("llm:tiny-lama", "did you mean tiny-llama?", False),
        (
            "llm:runs/tictactoe_tiny/best",
            "no model folder or training checkpoint at runs/tictactoe_tiny/best",
            False,
        ),
        (
            {"by_game": {"tic_tac_toe": "minimx"}},
            "unknown agent 'minimx'; did you mean minimax?",
            False,
        ),
        ({"checkpoints": str(misfit)}, "does not fit tiny-llama:hidden=128:heads=8", True),
    ):
        cfg = {
            "name": "typo",
            "format": "round_robin",
            "players": {"a": "random", "b": player},
            "games": ["tic_tac_toe"],
        }
        assert arena_main(["tournament", str(write(tmp_path, cfg))]) == 2
        out, err = capsys.readouterr()
        assert message in err.strip().splitlines()[-1], err
        assert ("store runs" in out) == announced, out
        assert not (tmp_path / "runs" / "typo").exists()


def test_missing_config_file(tmp_path, capsys):
    assert arena_main(["tournament", str(tmp_path / "nope.yaml")]) == 2
    assert "not found" in capsys.readouterr().err


def test_smollm2_tournament_config_is_valid():
    from agents.by_game import build_agent
    from tournaments.config import arena_options, load_config

    cfg = load_config(ROOT / "configs" / "tournament_smollm2.yaml")
    assert (
        cfg.format == "round_robin"
        and [g.name for g in cfg.games] == ["tic_tac_toe"]
        and cfg.games_per_pairing == 20
    )
    assert (
        cfg.players["smollm2"]["model"] == "smollm2-135m" and cfg.players["smollm2"]["constrained"]
    )
    arena_options(cfg.arena)
    for (
        name,
        spec,
    ) in cfg.players.items():  # bots build; LLM specs are checked without loading the model
        if isinstance(spec, dict) and spec.get("type") == "llm":
            from agents.llm_agent import LLMAgentConfig

            LLMAgentConfig(
                **{k: v for k, v in spec.items() if k not in ("type", "model", "backend")}
            )
        else:
            build_agent(name, spec)


def players_build(cfg) -> None:
    """The config's arena options are valid and every player builds: bots for real, LLM
    options checked without loading a model."""
    from agents.by_game import build_agent
    from agents.llm_agent import LLMAgentConfig
    from tournaments.config import arena_options

    arena_options(cfg.arena)
    for name, spec in cfg.players.items():
        if isinstance(spec, dict) and spec.get("type") == "llm":
            LLMAgentConfig(**{k: v for k, v in spec.items() if k not in ("type", "model")})
        else:
            build_agent(name, spec)


def test_checkpoints_config_is_valid(tmp_path, monkeypatch):
    """configs/tournament_checkpoints.yaml: one player per checkpoint of runs/tictactoe_tiny and its
    best/, on the board the tiny tic-tac-toe run trains on."""
    from tournaments.config import load_config

    run = tmp_path / "runs" / "tictactoe_tiny"
    for step in (580, 600):
        (run / "checkpoints" / f"step_{step:08d}").mkdir(parents=True)
    (run / "best").mkdir()
    (run / "best" / "model.safetensors").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(ROOT / "configs" / "tournament_checkpoints.yaml")
    assert list(cfg.players) == [
        "tiny@580",
        "tiny@600",
        "tiny@best",
        "random",
        "mcts-100",
        "minimax",
    ]
    assert cfg.players["tiny@best"] == {
        "type": "llm",
        "model": str(Path("runs") / "tictactoe_tiny" / "best"),
        "temperature": 0,
    }
    trained = yaml.safe_load((ROOT / "configs" / "train_tictactoe_tiny.yaml").read_text())
    assert [(g.name, g.params) for g in cfg.games] == [
        (g["name"], g["params"]) for g in trained["games"]
    ]
    assert cfg.games[0].opening > 0 and cfg.rating.reference == "random"
    players_build(cfg)


def test_the_main_job_ranks_every_checkpoint_its_training_run_keeps(tmp_path, monkeypatch):
    """configs/quickstart.yaml reads the run configs/quickstart_train.yaml writes: one player
    per checkpoint (the untrained step 0 included), on the board that run trains on."""
    from tournaments.config import load_config
    from training.selfplay import load_config as load_train_config

    train = load_train_config(ROOT / "configs" / "quickstart_train.yaml")
    assert train.checkpoint_initial and train.keep_checkpoints == 0
    steps = list(range(0, train.steps + 1, train.checkpoint_every))
    assert steps == [0, 5, 10, 15, 20]
    run = tmp_path / train.run_dir
    for step in steps:
        (run / "checkpoints" / f"step_{step:08d}").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    cfg = load_config(ROOT / "configs" / "quickstart.yaml")
    assert list(cfg.players)[: len(steps)] == [f"tiny@{s}" for s in steps]
    assert {"smollm2", "random", "mcts-10", "mcts-100", "minimax"} <= set(cfg.players)
    assert [(g.name, g.params) for g in cfg.games] == [(g.name, g.params) for g in train.games]
    assert cfg.games[0].opening > 0 and cfg.rating.reference == "random"
    players_build(cfg)


def _one_line_error(proc, command="tournament"):
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().replace("\r", "\n").splitlines()
    assert lines[-1].startswith(f"arena {command}: error: "), proc.stderr
    return lines[-1]


def test_a_binary_config_file_is_a_one_line_error_naming_it(tmp_path, capsys):
    for name, data, at in [
        ("bytes.yaml", bytes(range(256)) * 8, 128),
        ("latin1.yaml", "name: caf\xe9\n".encode("latin-1"), 9),
    ]:
        path = tmp_path / name
        path.write_bytes(data)
        assert arena_main(["tournament", str(path)]) == 2
        assert (
            capsys.readouterr().err
            == f"arena tournament: error: {path}: not a YAML text file (byte {at} is not UTF-8 text)\n"
        )


def test_a_config_asking_for_too_many_matches_is_refused_at_once(tmp_path):
    import resource

    cfg = {
        "name": "huge",
        "format": "round_robin",
        "players": {"a": "random", "b": "random", "c": "random"},
        "games": ["tic_tac_toe"],
        "games_per_pairing": 100_000_000_000,
    }

    def cap_memory():  # the old code grew ~150 MB/s here: fail, don't take the machine down
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "tournament",
            str(write(tmp_path, cfg)),
            "--db",
            str(tmp_path / "h.db"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=cap_memory,
    )
    err = _one_line_error(proc)
    assert (
        "games_per_pairing 100000000000" in err
        and "300,000,000,000 matches in one round" in err
        and "the limit is 100,000" in err
    ), err
    assert not (tmp_path / "h.db").exists()


def test_a_read_only_run_folder_says_it_cannot_write_there(tmp_path, make_read_only, capsys):
    cfg = write(
        tmp_path,
        {
            "name": "ro",
            "format": "round_robin",
            "players": {"a": "random", "b": "minimax:1"},
            "games": ["tic_tac_toe"],
        },
    )
    folder = tmp_path / "run"
    db = folder / "t.db"
    assert arena_main(["tournament", str(cfg), "--db", str(db)]) == 0
    (folder / "t.html").unlink()
    make_read_only(folder)
    capsys.readouterr()
    for path in (db, folder / "new.db", folder / "sub" / "new.db"):
        assert arena_main(["tournament", str(cfg), "--db", str(path)]) == 2
        assert capsys.readouterr().err.startswith(
            f"arena tournament: error: cannot write to {folder} ("
        )
    # --report-only reads the finished store all the same, shows its leaderboard, then says the report cannot be written
    assert arena_main(["tournament", str(cfg), "--db", str(db), "--report-only"]) == 2
    out, err = capsys.readouterr()
    assert "ro: round_robin, 1 matches" in out and err.startswith(
        f"arena tournament: error: cannot write to {folder} ("
    )


def test_a_deleted_store_is_rebuilt_from_the_trajectories(tmp_path, capsys):
    cfg = write(
        tmp_path,
        {
            "name": "lost",
            "format": "round_robin",
            "players": {"a": "random", "b": "minimax:1", "c": "minimax:2"},
            "games": ["tic_tac_toe", "connect_four"],
            "games_per_pairing": 2,
        },
    )
    db = tmp_path / "t.db"
    assert arena_main(["tournament", str(cfg), "--db", str(db)]) == 0
    first = capsys.readouterr().out
    with sqlite3.connect(db) as conn:
        stored = sorted(conn.execute("SELECT * FROM matches"))
    lines = db.with_suffix(".jsonl").read_text().count("\n")
    for f in tmp_path.glob("t.db*"):
        f.unlink()
    assert arena_main(["tournament", str(cfg), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "recovered 12 match(es)" in out and "0 match(es) played now, 12 in all" in out
    assert db.with_suffix(".jsonl").read_text().count("\n") == lines == 12
    with sqlite3.connect(db) as conn:
        assert sorted(conn.execute("SELECT * FROM matches")) == stored
    board = lambda text: text[text.index("lost: round_robin") : text.index("report:")]  # noqa: E731
    assert board(out) == board(first)


def test_ctrl_c_says_how_many_matches_are_kept_and_how_to_resume(tmp_path):
    cfg = write(
        tmp_path,
        {
            "name": "ctrl-c",
            "format": "round_robin",
            "players": {"a": "mcts:200", "b": "mcts:200", "random": "random"},
            "games": ["tic_tac_toe"],
            "games_per_pairing": 30,  # 90 matches: seconds of play after the first two on any CPU
            "arena": {"concurrency": 1},
        },
    )
    db = tmp_path / "t.db"
    argv = [sys.executable, "-m", "cli.main", "tournament", str(cfg), "--db", str(db)]
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    deadline = time.time() + 60
    while proc.poll() is None and _stored(db) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the tournament finished before Ctrl-C: make it longer"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    kept = _stored(db)
    assert proc.returncode == 130 and 2 <= kept < 90
    assert err.strip().splitlines()[-1] == (
        f"arena tournament: interrupted: {kept} of the 90 matches scheduled so far are kept in "
        f"{db}; run the same command to resume"
    )
    rerun = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0 and "90 in all" in rerun.stdout
    assert played_now(rerun.stdout) == 90 - kept


def played_now(out: str) -> int:
    """Matches a resumed run played plus those it recovered from the trajectories (a Ctrl-C between
    a match's JSONL line and its store row leaves one there)."""
    played = int(re.search(r"(\d+) match\(es\) played now", out)[1])
    recovered = re.search(r"recovered (\d+) match\(es\)", out)
    return played + (int(recovered[1]) if recovered else 0)


def _stored(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            return conn.execute("SELECT COUNT(*) FROM matches").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_report_only_while_the_tournament_runs_shows_the_standing_so_far(tmp_path, capsys):
    n = 6
    cfg = write(
        tmp_path,
        {
            "name": f"sim-round_robin-{n}",
            "format": "round_robin",
            "players": {f"p{i:02d}": {"type": "sim"} for i in range(n)},
            "games": ["tic_tac_toe"],
            "games_per_pairing": 1,
            "seed": 0,
            "format_options": {},
        },
    )
    db, jsonl = tmp_path / "t.db", tmp_path / "t.jsonl"
    run = [
        sys.executable,
        "-m",
        "tournaments.sim",
        "--db",
        str(db),
        "--players",
        str(n),
        "--format",
        "round_robin",
        "--concurrency",
        "1",
    ]
    report = ["tournament", str(cfg), "--db", str(db), "--report-only"]
    proc = subprocess.Popen(
        [*run, "--delay", "0.3"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.time() + 60
        while (
            proc.poll() is None
            and not (jsonl.exists() and jsonl.read_text().count("\n") >= 2)
            and time.time() < deadline
        ):
            time.sleep(0.05)
        code = arena_main(report)
        assert proc.poll() is None, (
            "the tournament finished before --report-only looked: raise --delay"
        )
    finally:
        proc.kill()
        proc.wait()
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (
        f"tournament 'sim-round_robin-{n}' is running: " in out
        and "of the 15 matches scheduled so far are played" in out
    )
    assert all(f"p{i:02d}" in out for i in range(n)) and not db.with_suffix(".html").exists()
    assert arena_main(report) == 0  # killed: stopped, no longer running
    assert "stopped before its end" in capsys.readouterr().out
    assert subprocess.run(run, cwd=ROOT, capture_output=True, timeout=120).returncode == 0
    assert arena_main(report) == 0
    assert (
        f"sim-round_robin-{n}: round_robin, 15 matches" in capsys.readouterr().out
        and db.with_suffix(".html").exists()
    )


def test_a_full_disk_mid_tournament_is_one_line_keeps_the_finished_matches_and_resumes(
    tmp_path, monkeypatch
):
    """Writes that fail for want of space (a real file-size limit, RLIMIT_FSIZE, on the
    `arena tournament` process: SQLite's WAL or the trajectories hit it as they would a full
    disk) end the run with one line; the matches stored before stay, and the same command
    finishes the tournament with the standings of a run that never stopped."""
    import resource
    import signal

    monkeypatch.chdir(tmp_path)
    bots = {
        "name": "full disk",
        "format": "round_robin",
        "players": {"a": "random", "b": "random", "c": "random"},
        "games": ["tic_tac_toe"],
        "games_per_pairing": 40,
    }
    cfg = write(tmp_path, bots)

    def small_files():  # in the child: a write past 1.5 MiB fails (EFBIG) instead of killing it
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3 * 2**19, 3 * 2**19))

    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "tournament", str(cfg)],
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=small_files,
        cwd=tmp_path,
    )
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1, done.stderr
    assert err[0].startswith("arena tournament: error: ") and err[0].endswith(
        "(the matches finished before are kept: fix this, then run the same command to go on)"
    )
    db = tmp_path / "runs" / "full_disk" / "tournament.db"
    with sqlite3.connect(db) as conn:
        (kept,) = conn.execute("SELECT COUNT(*) FROM matches").fetchone()
    assert 0 < kept < 120
    assert arena_main(["tournament", str(cfg)]) == 0  # room again: it goes on
    (tmp_path / "again").mkdir()
    monkeypatch.chdir(tmp_path / "again")
    assert arena_main(["tournament", str(cfg)]) == 0  # the same tournament, never stopped
    standings = []
    for folder in (tmp_path, tmp_path / "again"):
        with sqlite3.connect(folder / "runs" / "full_disk" / "tournament.db") as conn:
            standings.append(
                conn.execute(
                    "SELECT match_id, scores, outcome FROM matches ORDER BY match_id"
                ).fetchall()
            )
    assert len(standings[0]) == 120 and standings[0] == standings[1]


BOTS = {
    "name": "store faults",
    "format": "round_robin",
    "players": {"a": "random", "b": "minimax:1", "c": "random"},
    "games": ["tic_tac_toe"],
    "games_per_pairing": 4,
}


def _as_a_user():
    """A command prefix that runs a process the way a user without write access to a folder
    runs it: root keeps its uid but loses the capabilities that let it ignore permission
    bits (so a 0555 folder refuses new files with EACCES, as it does a user)."""
    import os
    import shutil

    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is needed to drop root's permission override")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


@pytest.mark.parametrize("state", ["finished", pytest.param("killed", marks=pytest.mark.slow)])
def test_report_only_in_a_folder_the_user_cannot_write_shows_the_leaderboard(tmp_path, state):
    """--report-only writes nothing, so a folder the user cannot write is no obstacle: a store
    closed cleanly is read as an immutable file, and one a killed run left with a write-ahead
    log but no -shm (copied without it) from a private copy."""
    import os

    prefix = _as_a_user()
    folder = tmp_path / "run"
    db = folder / "t.db"
    cfg = write(tmp_path, BOTS)
    arena = [sys.executable, "-m", "cli.main", "tournament", str(cfg), "--db", str(db)]
    if state == "finished":
        assert subprocess.run(arena, cwd=ROOT, capture_output=True, timeout=120).returncode == 0
        (folder / "t.html").unlink()
    else:  # a run killed midway, its last matches only in the WAL
        code = (
            "import os, sys; from tournaments import store; from cli.main import main\n"
            "add = store.Store.add_result\n"
            "def stop_after_5(self, r):\n"
            "    add(self, r)\n"
            "    if self.count()[0] == 5: os._exit(9)\n"
            "store.Store.add_result = stop_after_5\n"
            "main(sys.argv[1:])\n"
        )
        subprocess.run([sys.executable, "-c", code, *arena[3:]], cwd=ROOT, timeout=120)
        assert Path(f"{db}-wal").stat().st_size > 0
        Path(f"{db}-shm").unlink()
    before = sorted(p.name for p in folder.iterdir())
    os.chmod(folder, 0o555)
    try:
        proc = subprocess.run(
            [*prefix, *arena, "--report-only"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.chmod(folder, 0o755)
    assert "not a tournament database" not in proc.stderr, proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written
    if state == "finished":  # the leaderboard, then the report that cannot be written
        assert proc.returncode == 2 and "store faults: round_robin, 12 matches" in proc.stdout
        assert proc.stderr.startswith(f"arena tournament: error: cannot write to {folder}")
    else:
        assert proc.returncode == 0, proc.stderr
        assert "5 of the 12 matches scheduled so far are played" in proc.stdout


def test_a_damaged_store_is_moved_aside_and_rebuilt_from_the_trajectories(tmp_path, capsys):
    cfg = write(tmp_path, BOTS)
    db = tmp_path / "t.db"
    run = ["tournament", str(cfg), "--db", str(db)]
    assert arena_main(run) == 0
    with sqlite3.connect(db) as conn:
        stored = sorted(conn.execute("SELECT match_id, scores, outcome FROM matches"))
    damaged = db.read_bytes()[: db.stat().st_size // 2]  # a half-copied file
    for content in (damaged, b"not a database at all" * 100):
        for f in tmp_path.glob("t.db*"):
            f.unlink()
        db.write_bytes(content)
        capsys.readouterr()
        assert arena_main([*run, "--report-only"]) == 2  # read-only: says the way on
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "is not a tournament database" in err
        assert "the same command without --report-only moves it aside and rebuilds" in err
        assert arena_main(run) == 0
        out, err = capsys.readouterr()
        (aside,) = tmp_path.glob("t.db.damaged-*")
        assert aside.read_bytes() == content  # kept, not deleted
        assert f"moved aside to {aside}" in err and "recovered 12 match(es)" in out
        with sqlite3.connect(db) as conn:
            assert sorted(conn.execute("SELECT match_id, scores, outcome FROM matches")) == stored
        aside.unlink()
    # no trajectories beside it: refused in one line, with the way on, and left in place
    other = tmp_path / "other.db"
    other.write_bytes(b"garbage" * 1000)
    assert arena_main(["tournament", str(cfg), "--db", str(other)]) == 2
    err = capsys.readouterr().err
    assert "holds no match to rebuild it from: move it aside" in err
    assert other.read_bytes() == b"garbage" * 1000


def test_a_trajectory_file_deleted_during_the_run_is_reported(tmp_path, capsys):
    """The JSONL deleted midway: the run still finishes (the store holds every result), and
    says how many stored matches have no trajectory, writing their ids to a file."""
    import os

    from tournaments import store

    cfg = write(tmp_path, BOTS)
    db = tmp_path / "t.db"
    jsonl = db.with_suffix(".jsonl")
    add = store.Store.add_result

    def delete_at_5(self, r):
        add(self, r)
        if self.count()[0] == 5:
            os.unlink(jsonl)

    store.Store.add_result = delete_at_5
    try:
        assert arena_main(["tournament", str(cfg), "--db", str(db)]) == 0
    finally:
        store.Store.add_result = add
    err = capsys.readouterr().err
    assert "warning: 5 of the 12 stored matches have no trajectory in" in err, err
    listing = db.with_suffix(".missing.txt").read_text().split()
    assert len(listing) == 5 and not set(listing) & {r.match_id for r in read_jsonl(jsonl)}
    assert arena_main(["tournament", str(cfg), "--db", str(db), "--report-only"]) == 0  # said again
    assert "5 of the 12 stored matches have no trajectory" in capsys.readouterr().err


def test_a_player_whose_backend_fails_ends_the_run_in_one_line_and_it_goes_on(
    tmp_path, monkeypatch, capsys
):
    from agents import by_game, make_agent  # arena tournament builds players with by_game's

    class Fails:
        name = "c"

        def __init__(self):
            self.inner, self.calls = make_agent("random", "c"), 0

        def act(self, turns):
            self.calls += 1
            if self.calls == 7:
                raise ConnectionResetError("the model server closed the connection")
            return self.inner.act(turns)

    build = by_game.build_agent
    cfg = write(tmp_path, {**BOTS, "players": {"a": "random", "b": "random", "c": "random"}})
    db = tmp_path / "t.db"
    run = ["tournament", str(cfg), "--db", str(db)]
    monkeypatch.setattr(by_game, "build_agent", lambda n, s: Fails() if n == "c" else build(n, s))
    assert arena_main(run) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "arena tournament: error: agent 'c' (Fails) failed: ConnectionResetError: the model server "
        "closed the connection (the matches finished before are kept: fix this, then run the same "
        "command to go on)"
    ]
    kept = sorted(r.match_id for r in read_jsonl(db.with_suffix(".jsonl")))
    with sqlite3.connect(db) as conn:
        assert sorted(m for (m,) in conn.execute("SELECT match_id FROM matches")) == kept
    assert 0 < len(kept) < 12
    monkeypatch.setattr(by_game, "build_agent", build)
    assert arena_main(run) == 0
    assert f"{12 - len(kept)} match(es) played now, 12 in all" in capsys.readouterr().out
