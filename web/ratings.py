"""What the tournament page shows beside its leaderboard, as data.

    rating_steps(rows)   the leaderboard's checkpoint players by training step: one series per
                         checkpoint family (`tiny@0`, `tiny@5`, ... of a `checkpoints:` entry)
    heat_map(result)     the head-to-head record: the share of points each row player took
                         from each column player, and their matches
    other_ratings        `tournaments.report.other_ratings`: OpenSkill, alpha-rank, Nash averaging

`rating_steps` reads the leaderboard rows the page already shows (`web.standings`), so the
plot's ratings and intervals are the leaderboard's; the other two are the static HTML
report's numbers, computed once per fit (`Standings.derived`).
"""

from __future__ import annotations

import re

from tournaments.ratings import win_matrix
from tournaments.report import other_ratings
from tournaments.run import TournamentResult

__all__ = ["CHECKPOINT", "MAX_HEAT_MAP", "heat_map", "other_ratings", "rating_steps"]

CHECKPOINT = re.compile(r"^(?P<family>.+)@(?P<step>\d+)$")  # NAME@STEP, as checkpoints make them
MAX_HEAT_MAP = 40  # the most players the heat map draws (a table of N x N cells)


def rating_steps(rows: list[dict]) -> dict:
    """Leaderboard rows -> the rating-against-step panel, in `web/static/curves.js`'s form:
    one series per checkpoint family, points `[step, null, elo, lo, hi]` by step (an
    unbounded interval end is null), `players` their names in the same order. Players not
    named NAME@STEP (bots, NAME@best) are left out; no series when there are none."""
    families: dict[str, list[tuple[int, dict]]] = {}
    for row in rows:
        m = CHECKPOINT.match(row["player"])
        if m:
            families.setdefault(m["family"], []).append((int(m["step"]), row))
    series = []
    for family, points in sorted(families.items()):
        points.sort(key=lambda p: p[0])
        series.append(
            {
                "label": family,
                "players": [r["player"] for _, r in points],
                "points": [[step, None, r["elo"], r["lo"], r["hi"]] for step, r in points],
            }
        )
    return {
        "title": "rating against training step (95% CI)",
        "y": "rating (Elo)",
        "log": False,
        "bars": True,
        "series": series,
    }


def heat_map(result: TournamentResult) -> dict:
    """The win-rate heat map's cells: `players` in the format's order; `rows[i][j]` is
    {rate, games} of row player i against column player j (rate: the share of points i took,
    a draw 1/2), null where they never met. No rows beyond MAX_HEAT_MAP players."""
    players = list(result.outcome.order)
    if len(players) > MAX_HEAT_MAP:
        return {"players": players, "rows": []}
    pts, cnt = win_matrix(result.games(), players)
    rows = [
        [
            {"rate": float(pts[i, j] / cnt[i, j]), "games": int(cnt[i, j])} if cnt[i, j] else None
            for j in range(len(players))
        ]
        for i in range(len(players))
    ]
    return {"players": players, "rows": rows}
