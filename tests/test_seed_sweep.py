"""training.seed_sweep: the seed list, each seed's config, the table and the figure."""

import pytest

from training.seed_sweep import parse_seeds, plot, seed_config, write_table


def test_parse_seeds_ranges_and_lists():
    assert parse_seeds("10-19") == list(range(10, 20))
    assert parse_seeds("10,12, 15-16") == [10, 12, 15, 16]
    with pytest.raises(ValueError, match="not a seed"):
        parse_seeds("ten")
    with pytest.raises(ValueError, match="no seed"):
        parse_seeds(" , ")


def test_seed_config_sets_seed_run_dir_and_threads_only(tmp_path):
    base = {"seed": 0, "run_dir": "runs/x", "threads": 1, "steps": 600}
    cfg = seed_config(base, 13, tmp_path, threads=2)
    assert cfg == {"seed": 13, "run_dir": str(tmp_path / "seed_13"), "threads": 2, "steps": 600}
    assert seed_config(base, 13, tmp_path, threads=None)["threads"] == 1 and base["seed"] == 0


def _row(seed, nl):
    return {"seed": seed, "step": 600, "minutes": 20.0, "wins": int(2000 * nl) - 100, "draws": 100, "losses": 2000 - int(2000 * nl),
            "non_losing": nl, "ci_low": nl - 0.01, "ci_high": nl + 0.01, "by_seat": {"player_0": 0.99, "player_1": nl * 2 - 0.99},
            "exact": nl + 0.001}


def test_table_counts_seeds_over_the_bar_and_the_median(tmp_path):
    rows = [_row(10, 0.95), _row(11, 0.85), _row(12, 0.93)]
    text = write_table(rows, tmp_path / "sweep.md", "t")
    assert "median 0.930; >= 0.90 for 2 of 3 seeds" in text
    assert "| 11 | 600 | 20.0 | 1600 / 100 / 300 | 0.850 [0.840, 0.860] | 0.990 | 0.710 | 0.851 |" in text
    plot(rows, tmp_path / "fig.png", "t")
    assert (tmp_path / "fig.png").stat().st_size > 1000
