"""experiments.tictactoe_seeds.seed_sweep: the seed list, each seed's config, the table and the figure."""

import json

import numpy as np
import pytest

from experiments.tictactoe_seeds.seed_sweep import (
    contention_warning,
    parse_seeds,
    plot,
    seed_config,
    write_table,
)


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
    return {
        "seed": seed,
        "step": 600,
        "minutes": 20.0,
        "wins": int(2000 * nl) - 100,
        "draws": 100,
        "losses": 2000 - int(2000 * nl),
        "non_losing": nl,
        "ci_low": nl - 0.01,
        "ci_high": nl + 0.01,
        "by_seat": {"player_0": 0.99, "player_1": nl * 2 - 0.99},
        "exact": nl + 0.001,
    }


def test_table_counts_seeds_over_the_bar_and_the_median(tmp_path):
    rows = [_row(10, 0.95), _row(11, 0.85), _row(12, 0.93)]
    text = write_table(rows, tmp_path / "sweep.md", "t")
    assert "median 0.930; >= 0.90 for 2 of 3 seeds" in text
    assert (
        "| 11 | 600 | 20.0 | 1600 / 100 / 300 | 0.850 [0.840, 0.860] | 0.990 | 0.710 | 0.851 |"
        in text
    )
    plot(rows, tmp_path / "fig.png", "t")
    assert (tmp_path / "fig.png").stat().st_size > 1000
    assert json.loads((tmp_path / "fig.json").read_text()) == rows


def test_table_counts_the_seeds_that_play_perfectly_in_both_seats(tmp_path):
    perfect = {
        "positions": [103, 568],
        "blunders": [0, 0],
        "adversary_loss": [0.0, 0.0],
        "perfect": True,
    }
    flawed = {
        "positions": [99, 540],
        "blunders": [0, 3],
        "adversary_loss": [0.0, 1.0],
        "perfect": False,
    }
    rows = [{**_row(10, 0.99), "perfect_play": perfect}, {**_row(11, 0.98), "perfect_play": flawed}]
    text = write_table(rows, tmp_path / "sweep.md", "t")
    assert "| 0/103, 0/568 | 0.00, 0.00 |" in text and "| 0/99, 3/540 | 0.00, 1.00 |" in text
    assert "perfect adversary, both seats): 1 of 2 seeds" in text


def test_score_takes_the_checkpoint_a_resume_takes_not_a_pointer_to_a_damaged_or_missing_folder(
    tmp_path, capsys
):
    from agents import checkpoint
    from agents.models import tiny_llama
    from experiments.tictactoe_seeds.seed_sweep import score
    from training.config import config_dict, parse_config
    from training.learner import Learner
    from training.selfplay import start_league

    config = {
        "model": "tiny-llama:hidden=32:heads=2:layers=1",
        "steps": 2,
        "games": [{"name": "kuhn_poker"}],
        "concurrency": 4,
        "agent": {"prompt": "compact", "constrained": True, "max_new_tokens": 4, "max_retries": 0},
    }
    cfg = parse_config(config)
    model, tok = tiny_llama(hidden=32, heads=2, layers=1)
    learner = Learner(model, tok, cfg.learner)
    ckpts = tmp_path / "seed_3" / "checkpoints"
    for step in (1, 2):
        checkpoint.save(
            ckpts,
            learner,
            step,
            config=config_dict(cfg),
            league=start_league(cfg.league).state_dict(),
            rng=np.random.default_rng(0),
            state={"advantage": {}, "elapsed": 60.0 * step, "games": 8 * step},
        )
    model_file = ckpts / "step_00000002" / "model.safetensors"
    model_file.write_bytes(model_file.read_bytes()[:100])  # the pointer's checkpoint is damaged
    assert checkpoint.latest(ckpts).name == "step_00000002"
    for pointer in ("step_00000002", "step_00000009"):  # damaged, then missing
        (ckpts / "latest").write_text(pointer + "\n")
        folder, skipped = checkpoint.resume_point(ckpts)
        assert folder.name == "step_00000001" and [p.name for p, _ in skipped] == ["step_00000002"]
        assert "model.safetensors is damaged" in str(skipped[0][1])
        row = score(config, 3, tmp_path, games=2, eval_seed=5)
        assert (row["step"], row["minutes"], row["games"], row["game"]) == (1, 1.0, 2, "kuhn_poker")
        assert (
            "seed 3: scoring step_00000001, not step_00000002: checkpoint file"
            in capsys.readouterr().out
        )
    assert checkpoint.finished(tmp_path / "seed_3", 1, 0) and not checkpoint.finished(
        tmp_path / "seed_3", 2, 0
    )  # a resume retrains step 2
    for folder in ckpts.glob("step_*"):
        (folder / "rng.pt").write_bytes(b"junk")
    with pytest.raises(ValueError, match="seed 3: no intact checkpoint in .*rng.pt is damaged"):
        score(config, 3, tmp_path, games=2, eval_seed=5)


@pytest.mark.slow
def test_score_all_in_two_processes_scores_as_one_process_does(tmp_path, capsys):
    from agents import checkpoint
    from agents.models import tiny_llama
    from experiments.tictactoe_seeds.seed_sweep import score_all
    from training.config import config_dict, parse_config
    from training.learner import Learner
    from training.selfplay import start_league

    config = {
        "model": "tiny-llama:hidden=32:heads=2:layers=1",
        "steps": 1,
        "games": [{"name": "kuhn_poker"}],
        "concurrency": 4,
        "agent": {"prompt": "compact", "constrained": True, "max_new_tokens": 4, "max_retries": 0},
    }
    cfg = parse_config(config)
    for seed in (3, 4):
        model, tok = tiny_llama(hidden=32, heads=2, layers=1, seed=seed)
        checkpoint.save(
            tmp_path / f"seed_{seed}" / "checkpoints",
            Learner(model, tok, cfg.learner),
            1,
            config=config_dict(cfg),
            league=start_league(cfg.league).state_dict(),
            rng=np.random.default_rng(0),
            state={"advantage": {}, "elapsed": 6.0, "games": 8},
        )
    alone = score_all(config, [3, 4], tmp_path, games=6, eval_seed=5)
    assert [r["seed"] for r in alone] == [3, 4] and alone[0] != {**alone[1], "seed": 3}
    assert "seed 4: step 1, non-losing" in capsys.readouterr().out
    assert score_all(config, [3, 4], tmp_path, games=6, eval_seed=5, parallel=2) == alone


def test_contention_warning_only_when_threads_outnumber_cpus():
    assert contention_warning(2, 1, 2) is None and contention_warning(1, 2, 2) is None
    assert contention_warning(2, 0, 2) is None  # threads chosen from the load at each run's start
    assert contention_warning(2, 2, 2) == (
        "warning: 2 runs x 2 torch threads on 2 CPUs contend and slow every run several-fold; "
        "use --parallel 1 or --threads 1"
    )
    assert "use --parallel 2 or --threads 1" in contention_warning(4, 2, 4)
