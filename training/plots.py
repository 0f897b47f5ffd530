"""Evaluation curves of training runs: `plot_eval(run_dirs, out)`.

One run: its non-losing rate per (game, opponent), training and held-out games (the
report set of every evaluation point), with the 95% Wilson band and the legal-move rate
(dashed), with `eval.exploitability` the policy's exact exploitability per game (log
scale), and with `eval.perfect_play` its blunders per seat over every position it reaches, against training step and against wall-clock minutes; the loop rewrites
`<run_dir>/eval.png` after every evaluation. Several runs (seeds, settings): one
line per run on the same axes, for `arena plot RUN_A RUN_B ... --out compare.png`; a seed
sweep's data file (its rows keep their runs' evaluation rows) draws all its runs, after their
folders are gone: `arena plot docs/figures/SWEEP.json --out SWEEP.png`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path


def read_eval(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "eval.jsonl"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: is {run_dir} a training run dir with at least one evaluation?"
        )
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sweep_label(row: dict) -> str:
    """A seed sweep row's legend name: its "label", else its arm and seed."""
    if row.get("label"):
        return str(row["label"]) + (f", seed {row['seed']}" if "seed" in row else "")
    parts = [str(row["arm"])] if "arm" in row else []
    return " ".join(parts + ([f"seed {row['seed']}"] if "seed" in row else [])) or "run"


def read_curves(path: Path | str) -> list[tuple[str, list[dict]]]:
    """(legend name, eval.jsonl rows) of a training run folder, or of every row of a seed sweep's
    data file (a .json list of rows that kept their runs' evaluation rows under "eval")."""
    path = Path(path)
    if path.suffix != ".json":
        return [(path.name, read_eval(path))]
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    rows = json.loads(path.read_text())
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path} is not a sweep's data file (a JSON list of rows)")
    if not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path} is not a sweep's data file (its rows are not JSON objects)")
    bare = [sweep_label(r) for r in rows if not r.get("eval")]
    if bare:
        raise ValueError(f"{path}: no evaluation rows kept for {', '.join(bare)}")
    return [(sweep_label(r), r["eval"]) for r in rows]


def plot_eval(
    run_dirs: Path | str | list,
    out: Path | str | None = None,
    labels: list[str] | None = None,
    target: float | None = None,
) -> Path:
    """Draw the evaluation curves of one or more runs into `out` (default `<run_dir>/eval.png`
    for one run; required for several); a seed sweep's data file stands for its runs
    (`read_curves`); `target`: a dotted line at that rate."""
    paths = [Path(run_dirs)] if isinstance(run_dirs, (str, Path)) else [Path(d) for d in run_dirs]
    if not paths:
        raise ValueError("plot_eval needs at least one run dir")
    curves = [c for p in paths for c in read_curves(p)]
    if out is None:
        if len(curves) > 1 or paths[0].suffix == ".json":
            raise ValueError("several runs need an output path (--out)")
        out = paths[0] / "eval.png"
    if labels:
        if len(labels) != len(curves):
            raise ValueError(f"{len(labels)} labels for {len(curves)} runs")
        curves = [(label, rows) for label, (_, rows) in zip(labels, curves)]
    return plot_curves(curves, out, target)


def plot_sweep(rows: list[dict], out: Path | str, label=sweep_label) -> Path | None:
    """The figure of a seed sweep: `rows` are its data file's rows, each with its run folder
    ("run") and, when the sweep kept them, that run's eval.jsonl rows ("eval"); `label(row)`
    names a line. Not redrawn (None, said on stdout) when a row has neither its rows nor its
    folder, so a figure never loses a run."""
    missing = [r for r in rows if "eval" not in r and not (Path(r["run"]) / "eval.jsonl").is_file()]
    if missing:
        print(f"{out} not redrawn: no curves for {', '.join(label(r) for r in missing)}")
        return None
    if not rows:
        return None
    return plot_curves([(label(r), r.get("eval") or read_eval(Path(r["run"]))) for r in rows], out)


def plot_curves(
    curves: list[tuple[str, list[dict]]], out: Path | str, target: float | None = None
) -> Path:
    """`plot_eval` over eval.jsonl rows already read: (label, rows) per run (a sweep keeps its
    runs' rows in its data file, so its figure can be redrawn after the run folders are gone)."""
    import matplotlib  # start-up time: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up time: matplotlib

    if not curves:
        raise ValueError("plot_curves needs at least one run's rows")
    single = len(curves) == 1
    series, gaps, walks = _split_rows(curves)
    gnames = sorted({g for g, _ in series})
    held_out = {
        g
        for (g, _), curves in series.items()
        for _, rs in curves
        if rs[-1].get("split") == "held_out"
    }
    panels = len(gnames) + len(gaps) + len(walks)
    fig, axes = plt.subplots(panels, 2, figsize=(11, 3.6 * panels), squeeze=False)
    for i, game in enumerate(gnames):
        title = f"{game}{' (held out)' if game in held_out else ''}"
        _plot_rates(axes[i], game, title, series, single, target)
    for i, game in enumerate(sorted(gaps), start=len(gnames)):
        _plot_exploitability(axes[i], game, gaps[game], single)
    for i, game in enumerate(sorted(walks), start=len(gnames) + len(gaps)):
        _plot_blunders(axes[i], game, walks[game], single)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


_Curves = list[tuple[str, list[dict]]]  # (run label, its rows) per run


def _split_rows(
    curves: _Curves,
) -> tuple[dict[tuple[str, str], _Curves], dict[str, _Curves], dict[str, _Curves]]:
    """Each run's rows by panel: (game, opponent) rate rows, exploitability rows per game,
    perfect-play rows per game; each a list of (run label, rows)."""
    series: dict[tuple[str, str], _Curves] = defaultdict(list)
    gaps: dict[str, _Curves] = defaultdict(list)  # exploitability rows
    walks: dict[str, _Curves] = defaultdict(list)  # perfect-play rows
    for label, run_rows in curves:
        by_key: dict[tuple[str, str], list[dict]] = defaultdict(list)
        by_game: dict[str, list[dict]] = defaultdict(list)
        by_walk: dict[str, list[dict]] = defaultdict(list)
        for r in run_rows:
            if r.get("kind") == "exploitability":
                by_game[r["game"]].append(r)
            elif r.get("kind") == "perfect_play":
                by_walk[r["game"]].append(r)
            else:
                by_key[(r["game"], r["opponent"])].append(r)
        for key, rows in by_key.items():
            series[key].append((label, rows))
        for game, rows in by_game.items():
            gaps[game].append((label, rows))
        for game, rows in by_walk.items():
            walks[game].append((label, rows))
    return series, gaps, walks


def _measure(rs: list[dict], ranked: bool) -> tuple[list, list, list]:
    """The curve and its band: the non-losing rate and its Wilson CI, or in a ranked game the
    mean return and its t CI."""
    if ranked:
        return (
            [r["mean_return"] for r in rs],
            [r["return_ci"][0] for r in rs],
            [r["return_ci"][1] for r in rs],
        )
    return [r["non_losing"] for r in rs], [r["ci_low"] for r in rs], [r["ci_high"] for r in rs]


def _plot_rates(
    axes,
    game: str,
    title: str,
    series: dict[tuple[str, str], _Curves],
    single: bool,
    target: float | None,
) -> None:
    """The non-losing rate (95% Wilson band) of `game` against each opponent, and with one run
    the legal-move rate (dashed), against step and minutes; in a ranked game (more than two
    seats, a social dilemma: no non-losing rate) the mean return with its 95% t band."""
    per_point, ranked = 0, False
    for (g, opp), curves in sorted(series.items()):
        if g != game:
            continue
        for label, rs in curves:
            per_point = rs[-1]["games"]
            ranked = rs[-1]["non_losing"] is None
            name = f"vs {opp}" if single else f"{label} vs {opp}"
            for j, x_key in enumerate(("step", "minutes")):
                ax = axes[j]
                x = [r[x_key] for r in rs]
                y, lo, hi = _measure(rs, ranked)
                ax.plot(x, y, marker="o", ms=3 if single else 2, label=name)
                ax.fill_between(x, lo, hi, alpha=0.2 if single else 0.1)
                if single and not ranked:
                    ax.plot(
                        x,
                        [1 - r["invalid_rate"] for r in rs],
                        ls="--",
                        color=ax.lines[-1].get_color(),
                        label=f"legal moves vs {opp}",
                    )
    for j, x_key in enumerate(("step", "minutes")):
        ax = axes[j]
        if target is not None:
            ax.axhline(target, ls=":", color="grey", label=f"target {target:g}")
        ax.set_xlabel("training step" if x_key == "step" else "wall-clock minutes")
        ax.grid(alpha=0.3)
        if ranked:
            ax.set_ylabel("mean return")
        else:
            ax.set_ylabel("non-losing / legal-move rate" if single else "non-losing rate")
            ax.set_ylim(0, 1.02)
        band = "95% t CI" if ranked else "95% Wilson CI"
        ax.set_title(f"{title} ({band}, {per_point} games per point)")
        ax.legend(loc="lower right", fontsize="small" if not single else None)


def _plot_exploitability(
    axes, game: str, curves: list[tuple[str, list[dict]]], single: bool
) -> None:
    """Exploitability (NashConv / 2; NashConv beyond two-player zero-sum games) of each run's
    policy against step and minutes, log scale."""
    zero_sum = all(r["exploitability"] is not None for _, rs in curves for r in rs)
    key = "exploitability" if zero_sum else "nash_conv"
    for label, rs in curves:
        for ax, x_key in zip(axes, ("step", "minutes")):
            ax.plot(
                [r[x_key] for r in rs],
                [max(r[key], 1e-4) for r in rs],  # an exact equilibrium's 0 on the log axis
                marker="o",
                ms=3 if single else 2,
                label="policy" if single else label,
            )
    for ax, x_key in zip(axes, ("step", "minutes")):
        ax.set_yscale("log")
        ax.set_xlabel("training step" if x_key == "step" else "wall-clock minutes")
        ax.set_ylabel(key.replace("_", " "))
        ax.grid(alpha=0.3, which="both")
        ax.set_title(f"{game}: {key.replace('_', ' ')} of the policy (exact)")
        ax.legend(loc="upper right", fontsize="small" if not single else None)


def _plot_blunders(axes, game: str, curves: list[tuple[str, list[dict]]], single: bool) -> None:
    """Positions with a value-losing move, per seat, over every position the policy reaches
    against any opponent (`evaluation.perfect_play`), against step and minutes."""
    for label, rs in curves:
        for seat in sorted({r["seat"] for r in rs}):
            seat_rows = [r for r in rs if r["seat"] == seat]
            name = f"seat {seat}" if single else f"{label} seat {seat}"
            for ax, x_key in zip(axes, ("step", "minutes")):
                ax.plot(
                    [r[x_key] for r in seat_rows],
                    [r["blunders"] for r in seat_rows],
                    marker="o",
                    ms=3 if single else 2,
                    label=name,
                )
    for ax, x_key in zip(axes, ("step", "minutes")):
        ax.set_xlabel("training step" if x_key == "step" else "wall-clock minutes")
        ax.set_ylabel("positions with a blunder")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.set_title(f"{game}: value-losing moves where the policy reaches (exact)")
        ax.legend(loc="upper right", fontsize="small" if not single else None)
