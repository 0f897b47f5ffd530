"""The transfer study's held-out differences as one figure, from one or more `study.json` files.

    python -m experiments.transfer.figure docs/figures/transfer_seed0.json docs/figures/transfer_seed1.json \
        --out docs/figures/transfer.png

One panel per held-out (game, opponent) cell: trained minus base non-losing rate with its
paired 95% bootstrap CI, a group of points per variant, one point per study (training seed).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def held_out_cells(study: dict) -> list[tuple[str, str]]:
    """The (game, opponent) cells of the held-out games, opponent by opponent, in the study's order.

    Args:
        study: a parsed `study.json`.

    Returns:
        The cells, without the per-game pooled rows (opponent "all").
    """
    first = next(iter(study["variants"].values()))
    held = set(study["held_out_games"])
    return [
        (r["game"], r["opponent"])
        for r in first["paired"]
        if r["game"] in held and r["opponent"] != "all"
    ]


def plot(studies: list[dict], labels: list[str], path: Path) -> None:
    """Draw the held-out non-losing differences of every variant of every study into `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = held_out_cells(studies[0])
    variants = list(studies[0]["variants"])
    fig, axes = plt.subplots(1, len(cells), figsize=(3.2 * len(cells), 3.4), sharey=True)
    for ax, (game, opponent) in zip(axes, cells):
        for i, variant in enumerate(variants):
            for k, study in enumerate(studies):
                rows = study["variants"].get(variant, {}).get("paired", [])
                row = next(
                    (r for r in rows if (r["game"], r["opponent"]) == (game, opponent)), None
                )
                if row is None:
                    continue
                d = row["non_losing"]
                x = i + (k - (len(studies) - 1) / 2) * 0.2
                ax.errorbar(
                    x,
                    d["diff"],
                    yerr=[[d["diff"] - d["ci"][0]], [d["ci"][1] - d["diff"]]],
                    fmt="os"[k % 2],
                    color=f"C{i}",
                    capsize=3,
                    label=labels[k] if i == 0 else None,
                )
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_xticks(range(len(variants)), variants, fontsize=7, rotation=20)
        ax.set_title(f"{game} vs {opponent}", fontsize=9)
    axes[0].set_ylabel("non-losing rate, trained - base")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("held-out games: paired difference with 95% bootstrap CI", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "studies", nargs="+", type=Path, help="study.json files (one per training seed)"
    )
    ap.add_argument("--out", type=Path, required=True, help="the figure (png)")
    args = ap.parse_args(argv)
    studies = [json.loads(p.read_text()) for p in args.studies]
    labels = [f"training seed {s.get('training_seed', i)}" for i, s in enumerate(studies)]
    plot(studies, labels, args.out)
    print(f"figure: {args.out}")


if __name__ == "__main__":
    main()
