"""`arena export trajectories`: match records as Parquet or a `datasets` folder, a row per agent
turn or per match, read back through `datasets` with the values the records hold."""

import sys

import pytest

from arena.dataset import MATCH_COLUMNS, TURN_COLUMNS, export_trajectories
from cli.main import main
from core.records import Attempt, MatchRecord, TurnRecord, append_jsonl

datasets = pytest.importorskip("datasets")

SYSTEM = {"role": "system", "content": "You play tic-tac-toe."}
USER = {"role": "user", "content": "LEGAL MOVES: [0], [2], [8]"}


def tic_tac_toe_match() -> MatchRecord:
    """An LLM (player_1) against a bot, after one random opening move: a reply that parsed on
    its second attempt, then a truncated one the random fallback replaced."""
    return MatchRecord(
        match_id="t-00000",
        game="tic_tac_toe",
        params={"board": "relative"},
        seed=7,
        seats={"player_0": "random", "player_1": "llm"},
        turns=[
            TurnRecord(0, "player_0", "opening", "4", 4, legal_moves=list("012345678")),
            TurnRecord(
                1,
                "player_1",
                "llm",
                "0",
                0,
                messages=[SYSTEM, USER],
                completion="I play [0]",
                token_ids=[40, 1380, 253],
                logprobs=[-0.25, -1.5, -0.125],
                prompt_token_ids=[1, 2, 3, 4],
                retries=1,
                attempts=[
                    Attempt("Let me", [7, 8], [-2.0, -3.0], "no_move: no legal move", "length"),
                    Attempt("I play [0]", [40, 1380, 253], [-0.25, -1.5, -0.125], None, "stop"),
                ],
                legal_moves=["0", "1", "2", "3", "5", "6", "7", "8"],
                finish_reason="stop",
            ),
            TurnRecord(2, "player_0", "random", "8", 8, reward=1.0),
            TurnRecord(
                3,
                "player_1",
                "llm",
                "2",
                2,
                valid=False,
                messages=[SYSTEM, USER],
                completion="The best",
                token_ids=[9, 10],
                logprobs=[-0.5, -0.75],
                fallback="random",
                attempts=[Attempt("The best", [9, 10], [-0.5, -0.75], "truncated: cut", "length")],
                reward=-1.0,
                finish_reason="length",
            ),
        ],
        returns={"player_0": 1.0, "player_1": -1.0},
        outcome={"player_0": "win", "player_1": "loss"},
        started_at=100.0,
        finished_at=101.5,
        prompt_tokens=8,
        completion_tokens=7,
    )


def three_player_match() -> MatchRecord:
    """Three seats, a free-text move, a failed backend, and an abort."""
    return MatchRecord(
        match_id="p-00001",
        game="negotiation",
        params={},
        seed=3,
        seats={"player_0": "a", "player_1": "b", "player_2": "c"},
        turns=[
            TurnRecord(0, "player_0", "a", "Hello.", "Hello.", reward=0.5),
            TurnRecord(
                1,
                "player_1",
                "b",
                "",
                None,
                valid=False,
                fallback="forfeit",
                attempts=[Attempt("", [], [], "backend_error: timed out", "error")],
                finish_reason="error",
            ),
        ],
        returns={"player_0": 0.0, "player_1": 0.0, "player_2": 0.0},
        outcome={"player_0": "draw", "player_1": "draw", "player_2": "draw"},
        error="stopped after max_turns=2 decisions",
        policy_version=12,
    )


@pytest.fixture
def files(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    append_jsonl(a, tic_tac_toe_match())
    append_jsonl(b, three_player_match())
    return [a, b]


def load_parquet(path, tmp_path):
    return datasets.load_dataset(
        "parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache")
    )


def test_turn_rows_round_trip_through_load_dataset(files, tmp_path):
    summary = export_trajectories(files, tmp_path / "out")
    assert summary.path == tmp_path / "out.parquet" and (summary.matches, summary.rows) == (2, 5)
    rows = list(load_parquet(summary.path, tmp_path))
    assert [(r["source"], r["match_id"], r["turn_index"]) for r in rows] == [
        ("a.jsonl", "t-00000", 1),  # the opening move is no agent's turn
        ("a.jsonl", "t-00000", 2),
        ("a.jsonl", "t-00000", 3),
        ("b.jsonl", "p-00001", 0),
        ("b.jsonl", "p-00001", 1),
    ]
    first, bot, cut, free, failed = rows
    assert first["prompt"] == [SYSTEM, USER]
    assert first["messages"] == [SYSTEM, USER, {"role": "assistant", "content": "I play [0]"}]
    assert first["completion"] == "I play [0]" and first["move"] == "0" and first["action"] == 0
    assert first["token_ids"] == [40, 1380, 253] and first["prompt_token_ids"] == [1, 2, 3, 4]
    assert first["logprobs"] == [-0.25, -1.5, -0.125]
    assert (first["seat"], first["agent"], first["opponent"]) == ("player_1", "llm", "random")
    assert (first["game"], first["params"], first["seed"]) == (
        "tic_tac_toe",
        '{"board": "relative"}',
        7,
    )
    assert (first["reward"], first["return"], first["outcome"]) == (0.0, -1.0, "loss")
    assert (first["valid"], first["parse_error"], first["retries"], first["attempts"]) == (
        True,
        None,
        1,
        2,
    )
    assert (first["finish_reason"], first["is_truncated"], first["has_error"]) == (
        "stop",
        False,
        False,
    )
    assert bot["prompt"] == bot["messages"] == [] and bot["finish_reason"] is None
    assert (bot["agent"], bot["opponent"], bot["reward"], bot["return"], bot["outcome"]) == (
        "random",
        "llm",
        1.0,
        1.0,
        "win",
    )
    assert (cut["valid"], cut["fallback"], cut["parse_error"]) == (
        False,
        "random",
        "truncated: cut",
    )
    assert (cut["finish_reason"], cut["is_truncated"], cut["has_error"]) == ("length", True, False)
    assert (free["move"], free["action"], free["opponent"]) == ("Hello.", None, "b | c")
    assert (free["has_error"], free["match_error"], free["policy_version"]) == (
        True,
        "stopped after max_turns=2 decisions",
        12,
    )
    assert (failed["action"], failed["fallback"], failed["finish_reason"]) == (
        None,
        "forfeit",
        "error",
    )
    assert failed["parse_error"] == "backend_error: timed out" and failed["opponent"] == "a | c"


def test_match_rows(files, tmp_path):
    summary = export_trajectories(files, tmp_path / "matches.parquet", per="match")
    assert summary.path == tmp_path / "matches.parquet" and summary.rows == 2
    ttt, neg = list(load_parquet(summary.path, tmp_path))
    assert ttt["agents"] == ["random", "llm"] and ttt["seats"] == ["player_0", "player_1"]
    assert (ttt["returns"], ttt["outcome"], ttt["winner"]) == (
        [1.0, -1.0],
        ["win", "loss"],
        "random",
    )
    assert ttt["moves"] == ["4", "0", "8", "2"]
    assert (ttt["turns"], ttt["opening_turns"], ttt["invalid_turns"], ttt["truncated_turns"]) == (
        4,
        1,
        1,
        1,
    )
    assert (ttt["is_truncated"], ttt["has_error"], ttt["prompt_tokens"]) == (True, False, 8)
    assert (ttt["started_at"], ttt["finished_at"]) == (100.0, 101.5)
    assert neg["winner"] is None and neg["agents"] == ["a", "b", "c"]
    assert (neg["has_error"], neg["is_truncated"], neg["policy_version"]) == (True, False, 12)


def test_the_datasets_format_saves_to_disk(files, tmp_path):
    out = tmp_path / "hf"
    assert main(["export", "trajectories", *map(str, files), str(out), "--format", "hf"]) == 0
    saved = datasets.load_from_disk(str(out))
    parquet = export_trajectories(files, tmp_path / "same").path
    assert saved.column_names == [name for name, _, _ in TURN_COLUMNS]
    assert list(saved) == list(load_parquet(parquet, tmp_path))
    assert (
        main(
            [
                "export",
                "trajectories",
                str(files[0]),
                str(tmp_path / "m"),
                "--per",
                "match",
                "--format",
                "hf",
            ]
        )
        == 0
    )
    assert datasets.load_from_disk(str(tmp_path / "m")).column_names == [
        n for n, _, _ in MATCH_COLUMNS
    ]


def test_bad_input_is_one_line(files, tmp_path, capsys, monkeypatch):
    def error(argv):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err
        return err

    out = str(tmp_path / "out")
    assert error(["export", "trajectories", str(tmp_path / "none.jsonl"), out]).endswith(
        f"no trajectory file {tmp_path / 'none.jsonl'}"
    )
    assert "is a folder" in error(["export", "trajectories", str(tmp_path), out])
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"match_id": 1}\n{"x": 2}\n')
    assert "trajectory schema version 0 is not supported" in error(
        ["export", "trajectories", str(junk), out]
    )
    assert not (tmp_path / "out.parquet").exists()  # nothing half written
    assert main(["export", "trajectories", str(files[0]), out]) == 0
    assert "out.parquet exists (add --overwrite" in error(
        ["export", "trajectories", str(files[0]), out]
    )
    assert main(["export", "trajectories", *map(str, files), out, "--overwrite"]) == 0
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    assert 'needs the datasets package: pip install -e ".[export]"' in error(
        ["export", "trajectories", str(files[0]), str(tmp_path / "h"), "--format", "hf"]
    )
