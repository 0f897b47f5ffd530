"""Trajectory records: what the arena writes for every match, and what training reads.

Schema version 1. On disk a run is JSONL, one `MatchRecord` per line (`asdict`), written
as each match finishes (append + flush), so a killed run keeps every finished match.

MatchRecord
    schema_version  int                always SCHEMA_VERSION
    match_id        str                unique within a run ("<run>-<index>")
    game            str                registry name, e.g. "tic_tac_toe"
    params          dict               game parameters passed to `games.make`
    seed            int                env seed (chance events and bot randomness)
    seats           dict[str, str]     env agent ("player_0") -> agent name
    turns           list[TurnRecord]   every decision, in order
    returns         dict[str, float]   final cumulative reward per env agent
    outcome         dict[str, str]     per env agent: "win" | "loss" | "draw"
    started_at, finished_at  float     unix seconds
    prompt_tokens, completion_tokens  int   totals over LLM turns
    error           str | None         set when the match was aborted (then returns are 0)
    policy_version  int | None         self-play: the training step whose weights the policy
                                       played with (0: the initial weights); None elsewhere

TurnRecord
    index           int                decision number within the match (0-based)
    player          str                env agent who moved
    agent           str                agent name in that seat
    messages        list[dict]         chat messages sent to the model (LLM turns only)
    completion      str                final completion text (raw, <think> kept)
    token_ids       list[int]          completion token ids
    logprobs        list[float]        behaviour log-probabilities of `token_ids`
    prompt_token_ids list[int]         prompt token ids (when the backend returns them)
    move            str                the move as text ("4", "Cooperate", a message)
    action          Any                env action id (int) or message (str)
    valid           bool               the final completion parsed to a legal move
    retries         int                correction rounds used
    fallback        str | None         "random" | "forfeit" when the policy stepped in
    attempts        list[Attempt]      every completion tried, with its parse error and
                                       finish_reason
    reward          float              reward this player accrued from this action until
                                       its next decision (or the end): what RL credits
    legal_moves     list[str]          legal moves offered
    constrained     bool               decoding was restricted to the legal moves
    explored        bool               the move was drawn uniformly, not sampled from the policy (an
                                       exploring start, `PendingTurn.explore`)
    finish_reason   str | None         how the deciding generation ended (LLM turns): "stop" (it
                                       ended by itself), "length" (cut at max_new_tokens: a
                                       truncated reply) or "error" (the backend failed); None for bots
    action_probs    list[list]         [[action, probability], ...]: the exact distribution the move
                                       was drawn from, over the legal actions, where the evaluation
                                       asked the agent for it (`arena eval` on the repeated
                                       dilemmas, `evaluation.run.OwnStream`); empty elsewhere
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


@dataclass
class Attempt:
    completion: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    error: str | None = None  # "<kind>: <message>" of the ParseError, None if it parsed
    finish_reason: str | None = None  # "stop" | "length" (cut at max_new_tokens) | "error"


@dataclass
class TurnRecord:
    index: int
    player: str
    agent: str
    move: str
    action: Any
    valid: bool = True
    messages: list[dict] = field(default_factory=list)
    completion: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_token_ids: list[int] = field(default_factory=list)
    retries: int = 0
    fallback: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    reward: float = 0.0
    legal_moves: list[str] = field(default_factory=list)
    constrained: bool = False
    explored: bool = False
    finish_reason: str | None = None
    action_probs: list[list] = field(default_factory=list)


@dataclass
class MatchRecord:
    match_id: str
    game: str
    params: dict
    seed: int
    seats: dict[str, str]
    turns: list[TurnRecord] = field(default_factory=list)
    returns: dict[str, float] = field(default_factory=dict)
    outcome: dict[str, str] = field(default_factory=dict)
    started_at: float = 0.0
    finished_at: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    policy_version: int | None = None
    roles: dict[str, str] = field(default_factory=dict)  # seat -> role, where the game has roles
    teams: dict[str, str] = field(default_factory=dict)  # seat -> team, where the game has teams
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=_default)

    @classmethod
    def from_dict(cls, d: dict) -> MatchRecord:
        version = d.get("schema_version", 0)
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"trajectory schema version {version} is not supported (expected {SCHEMA_VERSION})"
            )
        d = dict(d)
        d["turns"] = [
            TurnRecord(**{**t, "attempts": [Attempt(**a) for a in t.get("attempts", [])]})
            for t in d.get("turns", [])
        ]
        return cls(**d)


def outcomes(returns: dict[str, float], teams: dict[str, str] | None = None) -> dict[str, str]:
    """win/loss/draw per player: the best strictly-highest return wins, ties draw. With `teams`
    (player -> team, as a game declares them) the sides are the teams, a team's result the sum
    of its members' returns, and every member has its team's outcome."""
    side = {a: (teams or {}).get(a, a) for a in returns}
    result: dict[str, float] = {}
    for a, r in returns.items():
        result[side[a]] = result.get(side[a], 0.0) + r
    best = max(result.values())
    winners = [s for s, r in result.items() if r == best]
    if len(winners) == len(result):
        return {a: "draw" for a in returns}
    one = len(winners) == 1
    return {a: ("win" if one else "draw") if side[a] in winners else "loss" for a in returns}


def other_seat_of(name: str) -> str | None:
    """The player a seat name `X#k` (k a number) is another seat of, "X"; None for any other
    name. One agent holds several seats of a match under such names (a team played by one
    player: `arena.runner.with_other_seats`, `tournaments.store.seat_players`)."""
    base, sep, k = name.rpartition("#")
    return base if sep and base and k.isdigit() else None


def _default(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def append_jsonl(path: str | os.PathLike, record: MatchRecord) -> None:
    """Append one match and flush to disk: a crash after this keeps the match."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(record.to_json() + "\n")
        f.flush()
        os.fsync(f.fileno())


def check_writable(*paths: str | os.PathLike) -> None:
    """Raise a one-line ValueError "cannot write to X" unless each path can be written: its
    folder (created if missing; the path itself if it is a folder) takes a new file, and
    the file, if it exists, opens for appending. A probe, not `os.access`: root ignores
    permission bits, not a read-only mount or an immutable folder."""
    for path in map(Path, paths):
        folder = path if path.is_dir() else path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tempfile.NamedTemporaryFile(dir=folder, prefix=".write-probe-").close()
        except OSError as e:
            where = next(
                (p for p in [folder, *folder.parents] if p.exists()), folder
            )  # a folder that could not be made: its parent
            raise ValueError(f"cannot write to {where} ({e.strerror or e})") from None
        try:
            if path.is_file():
                open(path, "ab").close()
        except OSError as e:
            raise ValueError(f"cannot write to {path} ({e.strerror or e})") from None


def check_jsonl_out(path: str | os.PathLike) -> None:
    """A one-line error now, not after the first match, when matches cannot be appended to `path`."""
    if Path(path).is_dir():
        raise ValueError(
            f"{path} is a folder; give the trajectory file's path (e.g. {Path(path) / 'run.jsonl'})"
        )
    check_writable(path)


def read_jsonl(path: str | os.PathLike) -> Iterator[MatchRecord]:
    """Read matches back; a torn last line (a killed writer) is skipped."""
    for d in read_json_lines(path):
        yield MatchRecord.from_dict(d)


def read_json_lines(path: str | os.PathLike) -> Iterator[Any]:
    """The JSON values of a JSONL file, one per line; a torn last line (a killed writer) is skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines) - 1:
                return
            raise ValueError(f"{path}:{n + 1}: corrupt JSON line") from None
        yield d
