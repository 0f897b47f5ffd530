"""One match's `MatchRecord` out of a tournament's trajectory file, without reading the file.

The arena appends one record a line (`core.records.append_jsonl`), each line starting with
its match_id (`MatchRecord.to_json`). `Trajectories.record(jsonl, match_id)` keeps, per
file, the byte offset of every complete line's match, extended from where it stopped as the
file grows (a line still being written waits for its newline) and rebuilt when the file was
replaced or cut (a resume's `tournaments.store.read_log` may rewrite it); then it reads the
one line. Of duplicated ids the first counts, as in `read_log`.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from core.records import MatchRecord

_HEAD = b'{"match_id": '


@dataclass
class _Index:
    inode: int
    scanned: int = 0  # bytes read so far: the file up to the end of its last complete line
    where: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (start, length)


def _match_id(line: bytes) -> str | None:
    """The match_id a record line starts with (None for a line that is no record)."""
    try:
        if line.startswith(_HEAD):
            return json.JSONDecoder().raw_decode(line.decode("utf-8"), len(_HEAD))[0]
        return json.loads(line)["match_id"]
    except (ValueError, TypeError, KeyError):
        return None


class Trajectories:
    """Byte-offset indexes of trajectory files (see the module doc)."""

    def __init__(self) -> None:
        self._indexes: dict[Path, _Index] = {}
        self._lock = threading.Lock()

    def _index(self, path: Path) -> _Index:
        st = os.stat(path)
        index = self._indexes.get(path)
        if index is None or index.inode != st.st_ino or st.st_size < index.scanned:
            index = self._indexes[path] = _Index(st.st_ino)
        if st.st_size > index.scanned:
            with open(path, "rb") as f:
                f.seek(index.scanned)
                pos = index.scanned
                for line in f:
                    if not line.endswith(b"\n"):
                        break  # a line being written: indexed once it is whole
                    mid = _match_id(line)
                    if mid is not None and mid not in index.where:
                        index.where[mid] = (pos, len(line))
                    pos += len(line)
                index.scanned = pos
        return index

    def record(self, jsonl: Path, match_id: str) -> MatchRecord | None:
        """The record of `match_id` in `jsonl`, or None when the file lacks it."""
        if not jsonl.is_file():
            return None
        with self._lock:
            where = self._index(jsonl).where.get(match_id)
        if where is None:
            return None
        with open(jsonl, "rb") as f:
            f.seek(where[0])
            line = f.read(where[1])
        try:
            return MatchRecord.from_dict(json.loads(line))
        except (ValueError, TypeError, KeyError):
            return None
