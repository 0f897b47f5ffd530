"""Training runs' curves as data for the runs page, several runs on one set of panels.

A run folder's metrics.jsonl has a row per training step (its "reward": the mean return of
the step's matches; a full-width run's "exploitability" or "nash_conv") and its eval.jsonl a
row per evaluation point and (game, opponent), or per game for the exact measures (the rows
`training.plots` draws into eval.png). `panels(runs)` groups them into panels:

    reward                       metrics.jsonl "reward" per step
    exploitability (training)    metrics.jsonl "exploitability", else "nash_conv" (log scale)
    GAME vs OPPONENT             the non-losing rate with its 95% Wilson band; in a ranked
                                 game (N seats, a social dilemma) the mean return with its t band
    GAME: exploitability         the exact exploitability, else NashConv (log scale)
    GAME: blunders               positions with a value-losing move, per seat

Each series is one run's line: points [step, minutes, y, lo, hi] (lo, hi None without a
band). Rows are read with `core.records.read_json_lines`, which skips a line still being
written, so a run in progress draws as far as it got.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from core.records import read_json_lines


def _rows(path: Path) -> list[dict]:
    try:
        return [r for r in read_json_lines(path) if isinstance(r, dict)] if path.is_file() else []
    except (OSError, ValueError):
        return []


def _point(row: dict, y, lo=None, hi=None) -> list:
    return [row.get("step"), row.get("minutes"), y, lo, hi]


def _metric_panels(label: str, rows: list[dict], out: dict) -> None:
    """The reward and training exploitability series of one run's metrics.jsonl rows."""
    reward = [_point(r, r["reward"]) for r in rows if r.get("reward") is not None]
    if reward:
        out["reward", "mean return of the step's matches", False].append((label, reward))
    key = (
        "exploitability" if any(r.get("exploitability") is not None for r in rows) else "nash_conv"
    )
    gap = [_point(r, r[key]) for r in rows if r.get(key) is not None]
    if gap:
        out[f"{key.replace('_', ' ')} (training)", key.replace("_", " "), True].append((label, gap))


def _eval_panels(label: str, rows: list[dict], out: dict) -> None:
    """The evaluation series of one run's eval.jsonl rows, one per panel and line."""
    series: dict = defaultdict(list)
    for r in rows:
        kind = r.get("kind")
        if kind == "exploitability":
            key = "exploitability" if r.get("exploitability") is not None else "nash_conv"
            panel = (f"{r['game']}: {key.replace('_', ' ')}", key.replace("_", " "), True)
            series[panel, label].append(_point(r, r[key]))
        elif kind == "perfect_play":
            panel = (f"{r['game']}: blunders", "positions with a value-losing move", False)
            series[panel, f"{label} seat {r['seat']}"].append(_point(r, r["blunders"]))
        elif "opponent" in r:
            title = f"{r['game']} vs {r['opponent']}"
            if r.get("non_losing") is None:  # a ranked game
                lo, hi = r.get("return_ci") or (None, None)
                series[(title, "mean return", False), label].append(
                    _point(r, r.get("mean_return"), lo, hi)
                )
            else:
                series[(title, "non-losing rate", False), label].append(
                    _point(r, r["non_losing"], r.get("ci_low"), r.get("ci_high"))
                )
    for (panel, name), points in series.items():
        out[panel].append((name, points))


def panels(runs: dict[str, Path]) -> list[dict]:
    """The panels of the runs `runs` (label -> run folder): {"title", "y", "log", "series":
    [{"label", "points"}]}; reward first, then the rest by title."""
    out: dict = defaultdict(list)
    for label, folder in runs.items():
        _metric_panels(label, _rows(folder / "metrics.jsonl"), out)
        _eval_panels(label, _rows(folder / "eval.jsonl"), out)
    order = sorted(out, key=lambda p: (p[0] != "reward", p[0]))
    return [
        {
            "title": title,
            "y": y,
            "log": log,
            "series": [{"label": name, "points": pts} for name, pts in out[title, y, log]],
        }
        for title, y, log in order
    ]
