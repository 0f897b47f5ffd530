"""`arena plot` (`training.plots`): several runs on one chart, a sweep figure from kept rows."""

import json

from cli.main import main as cli_main


def test_arena_plot_draws_several_runs_on_one_chart(tmp_path, capsys):
    for seed in (0, 1):
        run = tmp_path / f"seed{seed}"
        run.mkdir()
        rows = [
            {
                "game": "tic_tac_toe",
                "opponent": "random",
                "step": s,
                "minutes": s / 30,
                "games": 200,
                "non_losing": 0.5 + s / 1000 + seed / 20,
                "ci_low": 0.45,
                "ci_high": 0.6 + s / 1000,
                "invalid_rate": 0.0,
            }
            for s in (0, 10, 20)
        ]
        (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "compare.png"
    assert (
        cli_main(
            [
                "plot",
                str(tmp_path / "seed0"),
                str(tmp_path / "seed1"),
                "--out",
                str(out),
                "--labels",
                "a,b",
                "--target",
                "0.9",
            ]
        )
        == 0
    )
    assert out.stat().st_size > 1000 and str(out) in capsys.readouterr().out
    assert (
        cli_main(["plot", str(tmp_path / "seed0")]) == 0
        and (tmp_path / "seed0" / "eval.png").exists()
    )
    assert (
        cli_main(["plot", str(tmp_path / "seed0"), str(tmp_path / "seed1")]) == 2
    )  # several runs need --out
    assert cli_main(["plot", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "eval.jsonl not found" in capsys.readouterr().err


def test_a_sweep_figure_is_drawn_from_kept_rows_and_never_loses_a_run(tmp_path, capsys):
    from training.plots import plot_sweep

    def curve(seed):
        return [
            {"game": "kuhn_poker", "kind": "exploitability", "step": s, "minutes": s / 10}
            | {"exploitability": 0.4 / (1 + s + seed)}
            for s in (0, 10, 20)
        ]

    on_disk = tmp_path / "seed2"
    on_disk.mkdir()
    (on_disk / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve(2)))
    rows = [
        {"seed": 0, "run": str(tmp_path / "gone0"), "eval": curve(0)},  # folder gone, rows kept
        {"seed": 2, "run": str(on_disk)},  # rows read from the folder
    ]
    out = tmp_path / "sweep.png"
    assert plot_sweep(rows, out, lambda r: f"seed {r['seed']}") == out
    assert out.stat().st_size > 1000
    drawn = out.stat().st_mtime_ns
    rows.append({"seed": 1, "run": str(tmp_path / "gone1")})  # neither: the figure is kept as it is
    assert plot_sweep(rows, out, lambda r: f"seed {r['seed']}") is None
    assert out.stat().st_mtime_ns == drawn
    assert "not redrawn: no curves for seed 1" in capsys.readouterr().out
    # arena plot draws a data file's rows; a row without its evaluation rows is named
    data = tmp_path / "sweep.json"
    data.write_text(json.dumps(rows[:1] + [{"arm": "mars", "seed": 3, "eval": curve(3)}]))
    assert cli_main(["plot", str(data), "--out", str(tmp_path / "again.png")]) == 0
    assert (tmp_path / "again.png").stat().st_size > 1000
    data.write_text(json.dumps(rows))
    assert cli_main(["plot", str(data), "--out", str(tmp_path / "no.png")]) == 2
    err = capsys.readouterr().err
    assert (
        "no evaluation rows kept for seed 2, seed 1" in err and not (tmp_path / "no.png").exists()
    )


def test_a_ranked_game_is_drawn_by_its_mean_return(tmp_path, monkeypatch):
    """A social dilemma of four seats has no non-losing rate (None in eval.jsonl): its panel is
    the mean return with its t interval, on the return's own scale."""
    import matplotlib.axes

    from training.plots import plot_eval

    rows = [
        {
            "game": "public_goods",
            "opponent": "random",
            "step": s,
            "minutes": s / 30,
            "games": 8,
            "non_losing": None,
            "ci_low": None,
            "ci_high": None,
            "mean_return": 120.0 + s,
            "return_ci": [110.0 + s, 130.0 + s],
            "rank": 2.5,
            "invalid_rate": 0.0,
        }
        for s in (0, 10, 20)
    ]
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn = []
    plot = matplotlib.axes.Axes.plot
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "plot",
        lambda ax, x, y, *a, **k: drawn.append(list(y)) or plot(ax, x, y, *a, **k),
    )
    assert plot_eval(tmp_path, tmp_path / "out.png").is_file()
    assert drawn == [[120.0, 130.0, 140.0]] * 2  # against step and against minutes
