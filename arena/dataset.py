"""Trajectories as a dataset: one Parquet row per (match, agent turn), or per match.

`export_trajectories(files, out)` reads trajectory JSONL files (`core.records`: what `arena
play`, `arena tournament`, `arena eval` and training write) and writes `out` as Parquet
(`format="parquet"`, read by pandas, polars, DuckDB, `datasets.load_dataset("parquet",
...)`), or as a Hugging Face `datasets` folder (`format="hf"`, `Dataset.save_to_disk`; it
needs the `datasets` package: `pip install -e ".[export]"`).

Rows (`per="turn"`, `TURN_COLUMNS`): one per decision an agent took, in match order (the
random opening moves a match may start with are no agent's decision: they appear in the
match rows' `moves`, not as turn rows). The chat columns follow the conversational layout
of TRL and `datasets`: `prompt` is the messages sent to the model, `messages` the same
followed by the reply as an assistant message, so the rows feed supervised fine-tuning
(`messages`), preference or offline RL (`prompt`, `completion`, `reward`, `return`,
behaviour `logprobs`) without reshaping. A bot's turn has empty chat columns.
`per="match"` (`MATCH_COLUMNS`): one row per match, lists in seat order.

Records are converted in chunks and written as they are read, so memory stays bounded by a
chunk (the `datasets` format holds the table in memory to save it).
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from arena.runner import OPENING
from core.output import check_output, staged
from core.records import MatchRecord, read_json_lines

_MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))

TURN_COLUMNS: list[tuple[str, pa.DataType, str]] = [
    ("source", pa.string(), "the trajectory file the match came from (its name)"),
    ("match_id", pa.string(), "the match's id, unique within its file"),
    ("game", pa.string(), "the game's registry name (`tic_tac_toe`, `openspiel:chess`)"),
    ("params", pa.string(), "the game's parameters, as a JSON object"),
    ("seed", pa.int64(), "the match seed (chance events and bots' randomness)"),
    ("policy_version", pa.int64(), "self-play: the training step of the weights; else null"),
    ("seat", pa.string(), "the env agent who moved (`player_0`, ...)"),
    ("agent", pa.string(), "the agent's name in the match"),
    ("opponent", pa.string(), "the other seats' agent names, in seat order, joined by ` | `"),
    ("turn_index", pa.int32(), "the decision's index in the match (opening moves counted)"),
    ("prompt", _MESSAGES, "the chat messages sent to the model (role, content)"),
    ("completion", pa.string(), "the reply that decided the turn, raw (`<think>` kept)"),
    ("messages", _MESSAGES, "`prompt` followed by the reply as an assistant message"),
    ("prompt_token_ids", pa.list_(pa.int32()), "the chat-templated prompt's token ids"),
    ("token_ids", pa.list_(pa.int32()), "the reply's token ids"),
    ("logprobs", pa.list_(pa.float64()), "behaviour log-probabilities of `token_ids`"),
    ("move", pa.string(), "the move played, as text (a message on free-text turns)"),
    ("action", pa.int64(), "the env action id; null on free-text turns and forfeits"),
    ("legal_moves", pa.list_(pa.string()), "the legal moves offered"),
    ("valid", pa.bool_(), "the reply parsed to a legal move"),
    ("parse_error", pa.string(), "why the deciding reply did not parse (`<kind>: ...`), else null"),
    ("retries", pa.int32(), "correction rounds used"),
    ("attempts", pa.int32(), "generations tried (retries included)"),
    ("fallback", pa.string(), "`random` or `forfeit` when the agent's policy stepped in"),
    ("constrained", pa.bool_(), "decoding was restricted to the legal moves"),
    ("explored", pa.bool_(), "the move was drawn uniformly (an exploring start)"),
    ("reward", pa.float64(), "reward from this move until the seat's next decision"),
    ("return", pa.float64(), "the seat's return over the whole match"),
    ("outcome", pa.string(), "the seat's result: `win`, `loss` or `draw`"),
    ("finish_reason", pa.string(), "how the deciding generation ended: stop, length, error"),
    ("is_truncated", pa.bool_(), "the deciding reply was cut at max_new_tokens"),
    ("has_error", pa.bool_(), "the backend failed on this turn, or the match was aborted"),
    ("match_error", pa.string(), "why the match was aborted, else null"),
]

MATCH_COLUMNS: list[tuple[str, pa.DataType, str]] = [
    ("source", pa.string(), "the trajectory file the match came from (its name)"),
    ("match_id", pa.string(), "the match's id, unique within its file"),
    ("game", pa.string(), "the game's registry name"),
    ("params", pa.string(), "the game's parameters, as a JSON object"),
    ("seed", pa.int64(), "the match seed"),
    ("policy_version", pa.int64(), "self-play: the training step of the weights; else null"),
    ("seats", pa.list_(pa.string()), "the env agents, in seat order"),
    ("agents", pa.list_(pa.string()), "the agent in each seat"),
    ("returns", pa.list_(pa.float64()), "each seat's return"),
    ("outcome", pa.list_(pa.string()), "each seat's result: `win`, `loss` or `draw`"),
    ("winner", pa.string(), "the agent with the single highest return, else null"),
    ("moves", pa.list_(pa.string()), "every move in order, opening moves included"),
    ("turns", pa.int32(), "decisions, opening moves included"),
    ("opening_turns", pa.int32(), "random opening moves"),
    ("invalid_turns", pa.int32(), "agent turns whose reply did not parse to a legal move"),
    ("truncated_turns", pa.int32(), "agent turns whose deciding reply was cut"),
    ("prompt_tokens", pa.int64(), "prompt tokens over the match's LLM turns"),
    ("completion_tokens", pa.int64(), "generated tokens, retries included"),
    ("started_at", pa.float64(), "unix seconds"),
    ("finished_at", pa.float64(), "unix seconds"),
    ("is_truncated", pa.bool_(), "some agent turn's deciding reply was cut"),
    ("has_error", pa.bool_(), "a backend failed on some turn, or the match was aborted"),
    ("match_error", pa.string(), "why the match was aborted, else null"),
]

TURN_SCHEMA = pa.schema([pa.field(n, t) for n, t, _ in TURN_COLUMNS])
MATCH_SCHEMA = pa.schema([pa.field(n, t) for n, t, _ in MATCH_COLUMNS])
FORMATS = ("parquet", "hf")
PER = ("turn", "match")
CHUNK = 2000  # matches converted per Parquet write


@dataclass
class ExportSummary:
    """What `export_trajectories` wrote."""

    path: Path
    matches: int
    rows: int
    files: int


def _chat(messages: list[dict]) -> list[dict]:
    return [
        {"role": str(m.get("role", "")), "content": str(m.get("content", ""))} for m in messages
    ]


def _deciding_error(turn) -> str | None:
    if turn.valid or not turn.attempts:
        return None
    return turn.attempts[-1].error


def turn_rows(record: MatchRecord, source: str) -> Iterator[dict]:
    """The turn rows (`TURN_COLUMNS`) of one match.

    Args:
        record: the match.
        source: the name of the file it came from (the `source` column).

    Returns:
        An iterator of row dicts, one per agent turn (opening moves left out), in match order.
    """
    seats = list(record.seats)
    params = json.dumps(record.params, sort_keys=True)
    for t in record.turns:
        if t.agent == OPENING:
            continue
        prompt = _chat(t.messages)
        messages = [*prompt, {"role": "assistant", "content": t.completion}] if prompt else []
        yield {
            "source": source,
            "match_id": record.match_id,
            "game": record.game,
            "params": params,
            "seed": record.seed,
            "policy_version": record.policy_version,
            "seat": t.player,
            "agent": t.agent,
            "opponent": " | ".join(record.seats[s] for s in seats if s != t.player),
            "turn_index": t.index,
            "prompt": prompt,
            "completion": t.completion,
            "messages": messages,
            "prompt_token_ids": t.prompt_token_ids,
            "token_ids": t.token_ids,
            "logprobs": t.logprobs,
            "move": t.move,
            "action": t.action
            if isinstance(t.action, int) and not isinstance(t.action, bool)
            else None,
            "legal_moves": t.legal_moves,
            "valid": t.valid,
            "parse_error": _deciding_error(t),
            "retries": t.retries,
            "attempts": len(t.attempts),
            "fallback": t.fallback,
            "constrained": t.constrained,
            "explored": t.explored,
            "reward": float(t.reward),
            "return": float(record.returns.get(t.player, 0.0)),
            "outcome": record.outcome.get(t.player),
            "finish_reason": t.finish_reason,
            "is_truncated": t.finish_reason == "length",
            "has_error": t.finish_reason == "error" or record.error is not None,
            "match_error": record.error,
        }


def match_row(record: MatchRecord, source: str) -> dict:
    """The match row (`MATCH_COLUMNS`) of one match.

    Args:
        record: the match.
        source: the name of the file it came from (the `source` column).

    Returns:
        The row as a dict.
    """
    seats = list(record.seats)
    played = [t for t in record.turns if t.agent != OPENING]
    winners = [s for s in seats if record.outcome.get(s) == "win"]
    return {
        "source": source,
        "match_id": record.match_id,
        "game": record.game,
        "params": json.dumps(record.params, sort_keys=True),
        "seed": record.seed,
        "policy_version": record.policy_version,
        "seats": seats,
        "agents": [record.seats[s] for s in seats],
        "returns": [float(record.returns.get(s, 0.0)) for s in seats],
        "outcome": [record.outcome.get(s) for s in seats],
        "winner": record.seats[winners[0]] if len(winners) == 1 else None,
        "moves": [t.move for t in record.turns],
        "turns": len(record.turns),
        "opening_turns": len(record.turns) - len(played),
        "invalid_turns": sum(not t.valid for t in played),
        "truncated_turns": sum(t.finish_reason == "length" for t in played),
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "started_at": float(record.started_at),
        "finished_at": float(record.finished_at),
        "is_truncated": any(t.finish_reason == "length" for t in played),
        "has_error": record.error is not None or any(t.finish_reason == "error" for t in played),
        "match_error": record.error,
    }


def read_records(path: Path) -> Iterator[MatchRecord]:
    """The matches of one trajectory file; a one-line ValueError naming the file and line of a
    record that is not one."""
    for n, d in enumerate(read_json_lines(path), 1):
        try:
            yield MatchRecord.from_dict(d)
        except (TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"{path}: match {n} is not a trajectory record ({e})") from None


def _tables(files: list[Path], per: str, chunk: int) -> Iterator[tuple[pa.Table, int]]:
    """(table, matches in it) per chunk of matches, over every file in order."""
    schema = TURN_SCHEMA if per == "turn" else MATCH_SCHEMA
    rows: list[dict] = []
    matches = 0
    for path in files:
        for record in read_records(path):
            if per == "turn":
                rows.extend(turn_rows(record, path.name))
            else:
                rows.append(match_row(record, path.name))
            matches += 1
            if matches == chunk:
                yield _table(rows, schema), matches
                rows, matches = [], 0
    if rows or matches:
        yield _table(rows, schema), matches


def _table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Rows as an Arrow table, built column by column (transposed in C: faster than
    `Table.from_pylist`)."""
    names = schema.names
    values = zip(*map(operator.itemgetter(*names), rows)) if rows else [[] for _ in names]
    return pa.table([pa.array(list(v), type=f.type) for v, f in zip(values, schema)], schema=schema)


def output_path(out: str | os.PathLike, format: str) -> Path:
    """Where `export_trajectories` writes: `OUT.parquet` (the suffix added when missing), or the
    folder `OUT` for the `datasets` format."""
    out = Path(out)
    if format == "parquet" and out.suffix != ".parquet":
        out = out.with_name(out.name + ".parquet")
    return out


def check_inputs(files: Iterable[str | os.PathLike]) -> list[Path]:
    """The trajectory files as paths; a one-line ValueError for one that is missing or a folder."""
    paths = [Path(f) for f in files]
    if not paths:
        raise ValueError("no trajectory file given")
    for p in paths:
        if p.is_dir():
            raise ValueError(f"{p} is a folder; give its trajectory files (*.jsonl)")
        if not p.is_file():
            raise ValueError(f"no trajectory file {p}")
    return paths


def export_trajectories(
    files: Iterable[str | os.PathLike],
    out: str | os.PathLike,
    format: str = "parquet",
    per: str = "turn",
    overwrite: bool = False,
    chunk: int = CHUNK,
) -> ExportSummary:
    """Write the matches of trajectory JSONL `files` as one dataset.

    Args:
        files: trajectory JSONL files (`core.records`), read in order.
        out: `OUT` for `OUT.parquet` (the suffix is added when missing), or the folder of a
            `datasets` dataset (`format="hf"`).
        format: "parquet" or "hf" (`datasets.Dataset.save_to_disk`; needs `datasets`).
        per: "turn" (a row per agent turn, `TURN_COLUMNS`) or "match" (`MATCH_COLUMNS`).
        overwrite: replace an existing `out` (else a ValueError).
        chunk: matches converted per write (bounds the memory of a Parquet export).

    Returns:
        What was written: the path, the matches, the rows and the files read.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r} (choose from {', '.join(FORMATS)})")
    if per not in PER:
        raise ValueError(f"unknown --per {per!r} (choose from {', '.join(PER)})")
    paths = check_inputs(files)
    path = output_path(out, format)
    check_output(path, overwrite)  # before any record is read
    if format == "hf":
        try:
            import datasets  # optional heavy dependency: the `export` extra
        except ImportError:
            raise ValueError(
                'the datasets format needs the datasets package: pip install -e ".[export]"'
            ) from None
    matches = rows = 0
    schema = TURN_SCHEMA if per == "turn" else MATCH_SCHEMA
    with staged(path, overwrite) as tmp:
        if format == "parquet":
            with pq.ParquetWriter(tmp, schema) as writer:
                for table, n in _tables(paths, per, chunk):
                    writer.write_table(table)
                    matches, rows = matches + n, rows + table.num_rows
        else:
            tables = []
            for table, n in _tables(paths, per, chunk):
                tables.append(table)
                matches, rows = matches + n, rows + table.num_rows
            table = pa.concat_tables(tables) if tables else schema.empty_table()
            datasets.disable_progress_bars()  # one line from the command says what was written
            datasets.Dataset(table).save_to_disk(str(tmp))
    return ExportSummary(path, matches, rows, len(paths))
