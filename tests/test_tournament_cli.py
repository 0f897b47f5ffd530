"""`arena tournament CONFIG` end to end: real agents (bots and a tiny LLM doing real forward
passes) through the arena runner, a SQLite store, resume, report, and one-line errors."""

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from arena.cli import main as arena_main
from arena.records import read_jsonl

ROOT = Path(__file__).resolve().parents[1]

CONFIG = {
    "name": "cli test",
    "format": "swiss",
    "players": {
        "tiny": {"type": "llm", "model": "tiny-llama", "max_new_tokens": 3, "fallback": "random", "max_retries": 1, "seed": 0},
        "random": "random",
        "expert": {"by_game": {"tic_tac_toe": "mcts:20", "kuhn_poker": "cfr", "prisoners_dilemma": "tit_for_tat"}},
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
    assert llm_turns and all(t.messages and t.attempts and t.attempts[0].token_ids for t in llm_turns)
    # by_game: "expert" ran MCTS on tic-tac-toe and tit-for-tat in the dilemma (cooperates first)
    ipd_first = [t for r in records if r.game == "prisoners_dilemma" for t in r.turns[:2] if t.agent == "expert"]
    assert ipd_first and all(t.move == "Cooperate" for t in ipd_first)
    for name in CONFIG["players"]:
        assert name in out
    assert f"{stored} match(es) played now" in out

    # a rerun of a finished tournament plays nothing (and builds no agent)
    assert arena_main(["tournament", str(cfg)]) == 0
    assert "0 match(es) played now" in capsys.readouterr().out
    html.unlink()
    assert arena_main(["tournament", str(cfg), "--report-only"]) == 0
    assert html.exists()


def test_explicit_db_path(tmp_path, capsys):
    cfg = dict(CONFIG, format="anchor", players={"random": "random", "r2": "random", "r3": "random"},
               games=["kuhn_poker"], format_options={"anchor": "random"})
    db = tmp_path / "elsewhere" / "mine.db"
    assert arena_main(["tournament", str(write(tmp_path, cfg)), "--db", str(db)]) == 0
    assert db.exists() and db.with_suffix(".jsonl").exists() and db.with_suffix(".html").exists()
    assert "report: " + str(db.with_suffix(".html")) in capsys.readouterr().out


def test_random_openings_start_matches_and_both_seat_orders_share_them(tmp_path):
    cfg = {"name": "openings", "format": "round_robin", "players": {"a": "minimax", "b": "minimax"},
           "games_per_pairing": 6, "seed": 3, "games": [{"name": "tic_tac_toe", "opening": 3}]}
    db = tmp_path / "opened.db"
    assert arena_main(["tournament", str(write(tmp_path, cfg)), "--db", str(db)]) == 0
    opened = {r.match_id: [(t.agent, t.move) for t in r.turns] for r in read_jsonl(db.with_suffix(".jsonl"))}
    # 0..3 random moves open each match, recorded as the agent "opening"
    assert len(opened) == 6 and len({tuple(m) for m in opened.values()}) > 1
    assert any(m[0][0] == "opening" for m in opened.values())
    for m in opened.values():  # the opening comes first, then only the players move
        k = sum(agent == "opening" for agent, _ in m)
        assert k <= 3 and all(agent == "opening" for agent, _ in m[:k])
    # both seat orders of a pairing (games 2m, 2m+1) open the same way
    for g in range(0, 6, 2):
        first, second = (opened[f"RR|a|b|0.tic_tac_toe|{i}"] for i in (g, g + 1))
        assert [mv for ag, mv in first if ag == "opening"] == [mv for ag, mv in second if ag == "opening"]
    with sqlite3.connect(db) as conn:
        assert {o for (o,) in conn.execute("SELECT opening FROM schedule")} == {3}


BAD = [
    ({"format": "ladder"}, "unknown format 'ladder'"),
    ({"players": {"a": "random"}}, "at least two player"),
    ({"players": {"a": "random", "b": {"model": "x"}}}, "needs a 'type'"),
    ({"players": {"a": "random", "b": {"by_game": {"tic_tac_toe": "random"}}}}, "by_game has no agent for kuhn_poker"),
    ({"players": {"a|b": "random", "c": "random"}}, "without '|'"),
    ({"games": ["tic_tac_tow"]}, "tic_tac_toe"),
    ({"games": ["public_goods"]}, "pairwise"),
    ({"arena": {"workers": 3}}, "unknown arena option 'workers'"),
    ({"games_per_pairing": 0}, "games_per_pairing must be a positive integer"),
    ({"format_options": {"best_of": 3}}, "set games_per_pairing instead"),
    ({"rating": {"reference": "nobody"}}, "rating.reference 'nobody' is not a player"),
    ({"players": {"a": "random", "b": "alphazero"}}, "unknown agent 'alphazero'"),
    ({"players": {"a": "random", "b": "mcts:5"}}, "mcts needs a perfect-information"),
    ({"games": [{"name": "tic_tac_toe", "opening": -1}]}, "games[0].opening must be an integer >= 0"),
    ({"games": [{"name": "tic_tac_toe", "openings": 2}]}, "unknown key 'openings'"),
    ({"players": {"a": "random", "b": {"checkpoints": "no/such/run"}}}, "player 'b': no checkpoints under no/such/run"),
    ({"players": {"a": "random", "b": {"checkpoints": "x", "type": "llm"}}}, "no 'type' or 'model'"),
    ({"players": {"a": "random", "b": {"checkpoints": 5}}}, "checkpoints must name a training run's folder"),
    ({"format": ["swiss"]}, "unknown format ['swiss']"),
    ({"rating": {"reference": ["a"]}}, "rating.reference ['a'] is not a player"),
    ({"games": [{"name": "tic_tac_toe", "params": {"foo": 1}}]}, "tic_tac_toe has no parameter 'foo'"),
    ({"games": [{"name": "tic_tac_toe", "params": {"board": "nonsense"}}]}, "game 'tic_tac_toe' with params {'board': 'nonsense'}"),
    ({"players": {"a": "random", "b": {"by_game": {"tic_tac_tow": "minimax", "default": "random"}}}}, "did you mean 'tic_tac_toe'?"),
    ({"format": "single_elimination", "format_options": {"ratings": {"a": 1, "b": 2}}}, "used only with seeding: ratings"),
    ({"format": "swiss", "format_options": {"seed": "abc"}}, "format_options.seed must be an integer"),
    ({"format": "double_elimination", "format_options": {"grand_final_reset": "maybe"}}, "must be true or false"),
    ({"players": {"a": "random", "b": "mcts:0"}}, "at least 1 simulation"),
]


@pytest.mark.parametrize("change,message", BAD)
def test_bad_config_is_a_one_line_error(tmp_path, capsys, change, message):
    cfg = {"name": "bad", "format": "round_robin", "players": {"a": "random", "b": "random"},
           "games": ["tic_tac_toe", "kuhn_poker"], **change}
    code = arena_main(["tournament", str(write(tmp_path, cfg)), "--db", str(tmp_path / "b.db")])
    err = capsys.readouterr().err.strip().replace("\r", "\n").splitlines()[-1]  # after any progress bar
    assert code == 2
    assert err.startswith("arena tournament: error: ") and message in err, err


def test_prior_ratings_from_a_file_that_is_no_tournament(tmp_path, capsys):
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("these are not ratings\n" * 50)
    cfg = {"name": "bad", "format": "single_elimination", "players": {"a": "random", "b": "random"}, "games": ["kuhn_poker"],
           "format_options": {"seeding": "ratings", "ratings": str(not_a_db)}}
    assert arena_main(["tournament", str(write(tmp_path, cfg)), "--db", str(tmp_path / "b.db")]) == 2
    assert "notes.txt is not a tournament database" in capsys.readouterr().err
    assert not (tmp_path / "b.db").exists()
    # a DB given as the store that is not SQLite is refused the same way, and left as it was
    assert arena_main(["tournament", str(write(tmp_path, dict(cfg, format="round_robin", format_options={}))), "--db", str(not_a_db)]) == 2
    assert "is not a tournament database" in capsys.readouterr().err
    assert not_a_db.read_text() == "these are not ratings\n" * 50
    assert arena_main(["tournament", str(write(tmp_path, dict(cfg, format="round_robin", format_options={}))), "--db", str(tmp_path)]) == 2
    assert "is a folder, not a tournament database file" in capsys.readouterr().err


def test_checkpoint_players_may_not_shadow_another_player(tmp_path):
    from tournaments.config import load_config

    (tmp_path / "run" / "best").mkdir(parents=True)
    (tmp_path / "run" / "best" / "model.safetensors").write_bytes(b"")
    cfg = {"name": "x", "format": "round_robin", "games": ["tic_tac_toe"],
           "players": {"a@best": "random", "a": {"checkpoints": str(tmp_path / "run")}}}
    with pytest.raises(ValueError, match="two players named 'a@best' \\(from a's checkpoints\\)"):
        load_config(cfg)
    cfg["players"] = {"a": {"checkpoints": str(tmp_path / "run"), "temperature": 0}, "b": "random"}
    assert load_config(cfg).players["a@best"] == {"type": "llm", "model": str(tmp_path / "run" / "best"), "temperature": 0}


def test_missing_config_file(tmp_path, capsys):
    assert arena_main(["tournament", str(tmp_path / "nope.yaml")]) == 2
    assert "not found" in capsys.readouterr().err


def test_quickstart_config_is_valid():
    from arena.tournament import arena_options, build_agent
    from tournaments.config import load_config

    cfg = load_config(ROOT / "configs" / "quickstart.yaml")
    assert cfg.format == "round_robin" and {g.name for g in cfg.games} == {"tic_tac_toe", "kuhn_poker", "prisoners_dilemma"}
    assert cfg.players["smollm2"]["model"] == "smollm2-135m"
    arena_options(cfg.arena)
    for name, spec in cfg.players.items():  # bots build; LLM specs are checked without loading the model
        if isinstance(spec, dict) and spec.get("type") == "llm":
            from agents.llm_agent import LLMAgentConfig

            LLMAgentConfig(**{k: v for k, v in spec.items() if k not in ("type", "model", "backend")})
        else:
            build_agent(name, spec)
