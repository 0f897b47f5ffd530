"""Evaluation output: eval.json (one row per cell), a terminal table and an HTML page.

Row kinds in eval.json (a JSON list; each row has "kind"):
    cell            an evaluated agent in one (game, opponent, seat) or pooled ("all"):
                    W/D/L, win and non-losing rates with Wilson CIs, mean return with a t CI,
                    invalid-move and forfeit rates, tokens per move (`evaluation.metrics.Cell`);
                    in a ranked game (more than two players, or not competitive) no non-losing
                    rate (null) but the mean finishing rank with a t CI and the cooperation,
                    shown in a table of their own
    paired          agent minus baseline per cell and pooled per game in points, non-losing
                    rate, win rate, mean return and legal-move rate (ranked games: rank instead
                    of points and non-losing): each {baseline, agent, diff, ci, verdict}
                    (`evaluation.metrics.Difference`), paired bootstrap CI
    exploitability  {"game", "exploitability", "nash_conv", "method", ...}: exploitability
                    (NashConv / 2) for two-player zero-sum games, NashConv alone for the others
    blunders        the share of an agent's moves that lowered the game-theoretic value, per seat
    perfect_play    per seat, the tree walk over every position the agent's policy reaches against
                    any opponent: blunders, adversary return and loss rate (`evaluation.perfect_play`)
    social          cooperation, exploitation, welfare and fairness per (game, opponent), and
                    pooled over the opponents ("all"); on the dilemmas the memory-1 profile
                    ({method, first, CC, CD, DC, DD}, each {p, ci, n}) and the nearest named
                    strategy with its distance (`evaluation.social`), shown in a table of
                    their own
    messages        Trust-and-Split: share of the agent's hand claims that are true (and when
                    its hand loses), the welfare with the messages blanked and the paired
                    gain (`evaluation.messages`)
    commons         rounds played, collapses, the catch as a share of the sustainable optimum
                    and the Gini index of the catches per (game, opponent) (`evaluation.commons`)
    codewords       win rate, draw and assassin rates, words found per clue and clue-rule
                    violations per clue, per opponent and side (team, role; `evaluation.codewords`)

The HTML page (self-contained, figures as inline PNGs) has per game a chart of the win
and non-losing rates with their CIs per opponent, a forest plot of the paired differences
when there is a baseline, and every table.
"""

from __future__ import annotations

import json
from dataclasses import asdict, is_dataclass
from pathlib import Path

import numpy as np
from rich.table import Table

from core.console import NARROW_TABLE, make_console
from evaluation.metrics import ALL
from evaluation.social import PROFILE_FIELDS, STATES
from tournaments.report import CSS, escape, png_base64


def as_rows(items) -> list[dict]:
    return [asdict(x) if is_dataclass(x) else dict(x) for x in items]


def write_json(rows: list[dict], path: str | Path) -> Path:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(rows, indent=1) + "\n")
    tmp.replace(path)
    return path


def _rate(x: float, ci, sep: str = " ") -> str:
    return f"{x:.2f}{sep}[{ci[0]:.2f}, {ci[1]:.2f}]"


def _num(x: float, ci, sep: str = " ") -> str:
    return f"{x:+.2f}{sep}[{ci[0]:+.2f}, {ci[1]:+.2f}]"


WIDE = 150  # a console narrower than this gets the narrow tables (`print_report`)


def print_report(rows: list[dict], console=None, seats: bool = True) -> None:
    """Rich tables: cells per evaluated agent, paired differences, and the extra rows.

    On a console narrower than `WIDE` columns (piped output has 100) the tables are laid out to
    fit: a value above its CI, a seat's rows under their game's pooled row, and the forfeit rate
    and pair counts left to eval.json and eval.html.
    """
    console = console or make_console()
    narrow = console.width < WIDE
    style = NARROW_TABLE if narrow else {}
    sep = "\n" if narrow else " "
    _cell_tables(console, rows, seats, narrow, style, sep)
    _paired_table(console, rows, seats, narrow, style, sep)
    _extra_tables(console, rows, narrow, style)
    _profile_table(console, rows, narrow, style, sep)


def _cell_tables(
    console, rows: list[dict], seats: bool, narrow: bool, style: dict, sep: str
) -> None:
    """One table per evaluated agent: its cells (game, opponent, seat) with their CIs; the cells
    of ranked games (`evaluation.metrics.win_loss_game`) in a table of their own."""
    cells = [r for r in rows if r["kind"] == "cell" and (seats or r["seat"] == ALL)]
    for who in dict.fromkeys(r["agent"] for r in cells):
        mine = [r for r in cells if r["agent"] == who]
        scored = [r for r in mine if r["non_losing"] is not None]
        ranked = [r for r in mine if r["non_losing"] is None]
        if scored:
            title = f"{who}: 95% CIs (Wilson for rates, t for mean return)"
            columns = ["game", "opponent", "seat", "n", "W-D-L", "win rate", "non-losing"]
            _one_cell_table(console, scored, title, columns, narrow, style, sep)
        if ranked:
            title = (
                f"{who}, ranked games: 95% CIs (t for rank and mean return, Wilson for the win rate); "
                "rank 1 = highest return, tied players share their places; win = first alone"
            )
            columns = ["game", "opponent", "seat", "n", "rank", "win rate", "cooperation"]
            _one_cell_table(console, ranked, title, columns, narrow, style, sep)


def _one_cell_table(
    console, cells: list[dict], title: str, columns: list, narrow: bool, style: dict, sep: str
) -> None:
    """A table of cells: `columns`, then mean return, invalid, forfeit and tokens per move."""
    t = Table(title=title, **style)
    columns = [*columns, "mean return", "invalid", "forfeit", "tok/move"]
    if narrow:
        columns = [c for c in columns if c not in ("seat", "n", "forfeit")]
    for col in columns:
        t.add_column(col, justify="left" if col in ("game", "opponent", "seat") else "right")
    for r in _pooled_first(cells) if narrow else cells:
        values = {
            "game": _game_or_seat(r) if narrow else r["game"],
            "opponent": r["opponent"],
            "seat": r["seat"],
            "n": str(r["matches"]),
            "W-D-L": f"{r['wins']}-{r['draws']}-{r['losses']}",
            "win rate": _rate(r["win_rate"], r["win_ci"], sep),
            "non-losing": _rate(r["non_losing"], r["non_losing_ci"], sep)
            if r["non_losing"] is not None
            else "-",
            "rank": _rate(r["rank"], r["rank_ci"], sep) if r.get("rank") is not None else "-",
            "cooperation": "-" if r.get("cooperation") is None else f"{r['cooperation']:.2f}",
            "mean return": _num(r["mean_return"], r["return_ci"], sep),
            "invalid": f"{r['invalid_rate']:.2f}",
            "forfeit": f"{r['forfeit_rate']:.2f}",
            "tok/move": f"{r['tokens_per_move']:.1f}",
        }
        t.add_row(*(values[c] for c in columns), style="bold" if r["seat"] == ALL else None)
    console.print(t)


def _paired_table(
    console, rows: list[dict], seats: bool, narrow: bool, style: dict, sep: str
) -> None:
    """The paired differences agent - baseline on the same matches, if any."""
    paired = [r for r in rows if r["kind"] == "paired" and (seats or r["seat"] == ALL)]
    if paired:
        t = Table(
            title="agent - baseline on the same matches (paired bootstrap 95% CI; green: better, red: worse)",
            **style,
        )
        measures = {
            "points": "points",
            "non_losing": "non-losing",
            "legal_move_rate": "legal moves",
            "mean_return": "return",
        }
        if any(r.get("rank") for r in paired):  # a ranked game: its rank difference
            measures["rank"] = "rank"
        columns = ["game", "opponent", "seat", "pairs", *measures.values(), "verdict (points)"]
        if narrow:
            columns = [c for c in columns if c not in ("seat", "pairs")]
        for col in columns:
            left = col in ("game", "opponent", "seat", "verdict (points)")
            t.add_column(
                col,
                justify="left" if left else "right",
                no_wrap=narrow and col in ("game", "opponent"),
                max_width=13 if narrow and col == "verdict (points)" else None,  # "no detectable"
            )
        for r in _pooled_first(paired) if narrow else paired:
            values = {
                "game": _game_or_seat(r) if narrow else r["game"],
                "opponent": r["opponent"],
                "seat": r["seat"],
                "pairs": str(r["pairs"]),
                **{name: _diff(r.get(m), sep) for m, name in measures.items()},
                "verdict (points)": r["points"]["verdict"]
                if r["points"] is not None
                else f"{r['mean_return']['verdict']} (return)",
            }
            t.add_row(*(values[c] for c in columns), style="bold" if r["opponent"] == ALL else None)
        console.print(t)


def _extra_tables(console, rows: list[dict], narrow: bool, style: dict) -> None:
    """One table per extra kind of row present: exploitability, blunders, perfect play, social."""
    for kind, title in (
        (
            "exploitability",
            "exploitability (two-player zero-sum games) or NashConv (the others) of the agent's own policy "
            "(OpenSpiel best response)",
        ),
        ("blunders", "blunders: moves that lowered the game-theoretic value"),
        ("perfect_play", "perfect play: every position the policy reaches against any opponent"),
        ("social", "social dilemma metrics"),
        (
            "messages",
            "messages: how often the agent's claims about its hand are true, and the welfare the "
            "messages add (blanked at evaluation)",
        ),
        (
            "commons",
            "commons: rounds played, collapses, catch as a share of the sustainable optimum, Gini",
        ),
        ("werewolf", WEREWOLF_TITLE),
        (
            "codewords",
            "codewords: win rate, words found per clue, assassin and clue-rule violation rates",
        ),
    ):
        extra = [r for r in rows if r["kind"] == kind]
        if extra:
            t = Table(title=title, **style)
            cols = [k for k in extra[0] if k != "kind" and k not in PROFILE_FIELDS]
            for c in cols:
                text = isinstance(extra[0][c], str)  # names: kept whole, the numbers wrap
                t.add_column(
                    c.replace("_", " ") if narrow else c,  # a header that may wrap
                    justify="left" if text else "right",
                    no_wrap=narrow and text,
                )
            for r in extra:
                t.add_row(*[_cell(r[c]) for c in cols])
            whole = console.options.update(max_width=10**6)  # the table's width uncut
            if console.measure(t, options=whole).maximum <= console.width:
                console.print(t)
            else:  # too many measures for a row: one column per row, a measure per line
                _transposed(console, extra, cols, title, style)


def _transposed(console, extra: list[dict], cols: list[str], title: str, style: dict) -> None:
    """`extra`'s rows as columns (headed by their names: agent, game, opponent...) and its
    measures as lines, in as many tables as the console's width needs; no value is cut."""
    names = [c for c in cols if isinstance(extra[0][c], str)]
    measures = [c for c in cols if c not in names]
    column = 24  # room for a value and its CI, e.g. "0.775 [0.701, 0.843]"
    per_table = max(1, (console.width - max(map(len, measures), default=0) - 2) // column)
    for start in range(0, len(extra), per_table):
        t = Table(title=title if start == 0 else None, **style)
        t.add_column("measure", justify="left", no_wrap=True)
        chunk = extra[start : start + per_table]
        for r in chunk:
            t.add_column("\n".join(str(r[c]) for c in names), justify="right", overflow="fold")
        for m in measures:
            t.add_row(m, *[_cell(r[m]) for r in chunk])
        console.print(t)


WEREWOLF_TITLE = (
    "werewolf: win rate by role (Wilson 95% CI), day votes on werewolves (the agent's, its tables' "
    "village's) and seer findings told in a later message (95% t CIs, the match as the unit)"
)


def _profile_table(console, rows: list[dict], narrow: bool, style: dict, sep: str) -> None:
    """The strategy profiles of the agents, if any."""
    profiles = profile_rows(rows, sep)
    if profiles:
        t = Table(title=PROFILE_TITLE, **style)
        columns = list(profiles[0])
        if narrow:  # an agent or game column that never changes says nothing
            columns = [
                c
                for c in columns
                if c not in ("agent", "game") or len({r[c] for r in profiles}) > 1
            ]
        for c in columns:  # names fold rather than end in an ellipsis
            text = c in PROFILE_TEXT
            t.add_column(c, justify="left" if text else "right", overflow="fold" if text else None)
        for r in profiles:
            t.add_row(*(r[c] for c in columns))
        console.print(t)


SHORT = {  # the strategies' usual abbreviations, for the tables
    "tit_for_tat": "TFT",
    "generous_tit_for_tat": "GTFT",
    "win_stay_lose_shift": "WSLS",
    "grim_trigger": "grim",
    "always_defect": "ALLD",
    "always_cooperate": "ALLC",
    "alternation": "ALT",
}
PROFILE_TITLE = (
    "memory-1 profile: P(cooperate) in round 1 and after each last round (own move first), "
    "95% CI, visits; nearest named strategy, Euclidean distance over the visited states "
    f"({', '.join(f'{v} {k}' for k, v in SHORT.items())}; ties all named)"
)
PROFILE_TEXT = ("agent", "game", "opponent", "from", "nearest")


def profile_rows(rows: list[dict], sep: str = " ") -> list[dict[str, str]]:
    """The memory-1 profile of every social row that has one, as display strings.

    Args:
        rows: eval.json's rows.
        sep: between a rate and its CI (a newline in the narrow tables).

    Returns:
        Per social row with a profile: agent, game, opponent, from (exact / counted), first,
        CC, CD, DC, DD ("p [low, high] (visits)", "-" if never visited), nearest (abbreviated,
        `SHORT`) and distance.
    """
    out = []
    for r in rows:
        prof = r.get("profile") if r["kind"] == "social" else None
        if not prof:
            continue
        line = {"agent": r["agent"], "game": r["game"], "opponent": r["opponent"]}
        line["from"] = prof["method"]
        for state in ("first", *STATES):
            x = prof[state]
            line[state] = "-" if x["p"] is None else f"{_rate(x['p'], x['ci'], sep)}{sep}({x['n']})"
        names = (r["nearest"] or "-").split(" or ")
        line["nearest"] = " / ".join(SHORT.get(n, n) for n in names)
        dist = r["nearest_distance"]
        line["distance"] = "-" if dist is None else f"{dist:.2f}"
        out.append(line)
    return out


def _game_or_seat(r: dict) -> str:
    """The narrow tables' first column: the game on a pooled row, the seat (indented) under it."""
    return r["game"] if r["seat"] == ALL else f"  {r['seat']}"


def _pooled_first(cells: list[dict]) -> list[dict]:
    """`cells` (or paired rows) with each (game, opponent)'s pooled row before its seats' rows."""
    order = {
        key: i for i, key in enumerate(dict.fromkeys((r["game"], r["opponent"]) for r in cells))
    }
    return sorted(cells, key=lambda r: (order[r["game"], r["opponent"]], r["seat"] != ALL))


def _diff(d: dict | None, sep: str = " ") -> str:
    """A paired difference and its CI, coloured by its verdict ("-": not measured in this game)."""
    if d is None:
        return "-"
    colour = {"better": "green", "worse": "red"}.get(d["verdict"])
    text = _num(d["diff"], d["ci"], sep)
    return f"[{colour}]{text}[/{colour}]" if colour else text


def _cell(v) -> str:
    if (
        isinstance(v, dict) and {"diff", "ci", "baseline", "agent"} <= v.keys()
    ):  # a paired Difference
        return f"{_num(v['diff'], v['ci'])} ({v['baseline']:.2f} -> {v['agent']:.2f})"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_cell(x) for x in v) + "]"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_cell(x)}" for k, x in v.items())
    return "-" if v is None else str(v)


# --- HTML -----------------------------------------------------------------------------------


def rates_figure(rows: list[dict], game: str) -> str:
    """Win and non-losing rates (pooled over seats) per opponent, a bar per evaluated agent, CI whiskers."""
    import matplotlib  # start-up time: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up time: matplotlib

    cells = [r for r in rows if r["kind"] == "cell" and r["game"] == game and r["seat"] == ALL]
    opponents = list(dict.fromkeys(r["opponent"] for r in cells))
    agents = list(dict.fromkeys(r["agent"] for r in cells))
    panels = (("win_rate", "win rate"), ("non_losing", "non-losing rate"))
    if any(r["non_losing"] is None for r in cells):  # a ranked game: no non-losing rate
        panels = (("win_rate", "win rate (first alone)"),)
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.2), squeeze=False)
    axes = axes[0]
    width = 0.8 / max(len(agents), 1)
    for ax, (key, label) in zip(axes, panels):
        ci_key = "win_ci" if key == "win_rate" else "non_losing_ci"
        for i, who in enumerate(agents):
            mine = {r["opponent"]: r for r in cells if r["agent"] == who}
            x = np.arange(len(opponents)) + (i - (len(agents) - 1) / 2) * width
            y = [mine[o][key] if o in mine else np.nan for o in opponents]
            err = [
                [
                    max(0.0, mine[o][key] - mine[o][ci_key][0]) if o in mine else 0
                    for o in opponents
                ],
                [
                    max(0.0, mine[o][ci_key][1] - mine[o][key]) if o in mine else 0
                    for o in opponents
                ],
            ]
            ax.bar(x, y, width, yerr=err, capsize=3, label=who)
        ax.set_xticks(range(len(opponents)), opponents, rotation=15)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{game}: {label} (95% Wilson CI)", fontsize=10)
    axes[0].legend(fontsize=8)
    return png_base64(fig)


def forest_figure(rows: list[dict], game: str) -> str | None:
    """Paired differences in points (agent - baseline) with their CIs, per cell and pooled."""
    paired = [r for r in rows if r["kind"] == "paired" and r["game"] == game]
    if not paired:
        return None
    import matplotlib  # start-up time: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up time: matplotlib

    measure = "points" if paired[0]["points"] is not None else "mean_return"  # ranked: return
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(paired) + 1))
    for i, r in enumerate(reversed(paired)):
        points = r[measure]
        color = {"better": "tab:green", "worse": "tab:red"}.get(points["verdict"], "tab:gray")
        pooled = r["seat"] == ALL
        ax.plot(points["ci"], [i, i], color=color, lw=2.5 if pooled else 1.5)
        ax.plot(
            [points["diff"]],
            [i],
            "D" if r["opponent"] == ALL else "o",
            color=color,
            ms=7 if pooled else 5,
        )
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(
        range(len(paired)), [f"{r['opponent']} / {r['seat']}" for r in reversed(paired)], fontsize=8
    )
    ax.set_xlabel(
        "points, agent - baseline (win 1, draw 0.5, loss 0), 95% paired bootstrap CI"
        if measure == "points"
        else "mean return, agent - baseline, 95% paired bootstrap CI"
    )
    ax.set_title(f"{game}: paired differences", fontsize=10)
    return png_base64(fig)


def _table_html(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = [k for k in rows[0] if k != "kind"]
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(_cell(r[c]))}</td>" for c in cols) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def write_html(rows: list[dict], path: str | Path, title: str, subtitle: str = "") -> Path:
    path = Path(path)
    parts = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1><p class='sub'>{escape(subtitle)}</p>",
    ]
    for game in dict.fromkeys(r["game"] for r in rows if r["kind"] == "cell"):
        parts.append(f"<h2>{escape(game)}</h2>")
        parts.append(
            f"<img alt='{escape(game)} rates' src='data:image/png;base64,{rates_figure(rows, game)}'>"
        )
        forest = forest_figure(rows, game)
        if forest:
            parts.append(
                f"<img alt='{escape(game)} paired differences' src='data:image/png;base64,{forest}'>"
            )
        parts.append(_table_html([r for r in rows if r["kind"] == "cell" and r["game"] == game]))
        parts.append(_table_html([r for r in rows if r["kind"] == "paired" and r["game"] == game]))
    kinds = ("exploitability", "blunders", "perfect_play", "social")
    for kind in (*kinds, "messages", "commons", "werewolf", "codewords"):
        extra = [r for r in rows if r["kind"] == kind]
        if extra:
            shown = [{k: v for k, v in r.items() if k not in PROFILE_FIELDS} for r in extra]
            parts.append(f"<h2>{kind}</h2>{_table_html(shown)}")
    profiles = profile_rows(rows)
    if profiles:
        parts.append(f"<h2>memory-1 profile</h2><p>{escape(PROFILE_TITLE)}</p>")
        parts.append(_table_html(profiles))
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
