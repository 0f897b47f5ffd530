"""An export's output, written in one piece: `arena export` never leaves half a file or folder.

`staged(out, overwrite)` yields a temp path beside `out` (`.tmp-<name>-<pid>`, the
name `agents.checkpoint.clean_tmp` knows) to write the file or folder into; when the block
ends without an error the temp path replaces `out`, otherwise it is removed and `out` is
as it was. An existing `out` is replaced only with `overwrite` (else a one-line
ValueError before anything is written).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path


def check_output(out: str | os.PathLike, overwrite: bool) -> None:
    """A one-line ValueError when `out` exists and may not be replaced."""
    if Path(out).exists() and not overwrite:
        raise ValueError(f"{out} exists (add --overwrite to replace it)")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def staged(out: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """A temp path to write `out` into; it becomes `out` when the block succeeds.

    Args:
        out: the file or folder to write.
        overwrite: replace an existing `out` (else a ValueError).

    Returns:
        A context manager yielding the temp path (nothing exists there yet).
    """
    out = Path(out)
    check_output(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")
    _remove(tmp)
    try:
        yield tmp
        if out.exists() or out.is_symlink():
            old = out.with_name(f".old-{out.name}-{os.getpid()}")
            os.replace(out, old)
            os.replace(tmp, out)
            _remove(old)
        else:
            os.replace(tmp, out)
    except BaseException:
        _remove(tmp)
        raise
