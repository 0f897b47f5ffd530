"""What `arena train` prints at its end (`training.console_lines`): the final evaluation and perfect-play lines."""

import re

import yaml

from agents import checkpoint
from cli.main import main as cli_main
from tests.tiny_run import TINY


def test_arena_train_cli(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "run_dir": str(tmp_path / "default")}))
    assert cli_main(["train", str(path), "--steps", "1", "--out", str(tmp_path / "cli")]) == 0
    out = capsys.readouterr().out
    assert "final eval tic_tac_toe vs random" in out and "non-losing" in out
    assert checkpoint.latest(tmp_path / "cli" / "checkpoints").name == "step_00000001"
    assert not (tmp_path / "default").exists()
    assert (
        cli_main(["train", str(path), "--steps", "2", "--out", str(tmp_path / "cli"), "--resume"])
        == 0
    )
    assert checkpoint.latest(tmp_path / "cli" / "checkpoints").name == "step_00000002"
    path.write_text(yaml.safe_dump({**TINY, "learner": {"lr": "big"}}))
    assert cli_main(["train", str(path)]) == 2
    err = capsys.readouterr().err
    assert "learner.lr must be float" in err and err.count("\n") == 1


def test_arena_train_ends_with_the_perfect_play_walk_of_each_seat(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "run_dir": str(tmp_path / "run")}))
    assert (
        cli_main(
            ["train", str(path), "--steps", "1", "--set", "eval.every=1"]
            + ["--set", "eval.perfect_play=true"]
        )
        == 0
    )
    out = capsys.readouterr().out
    for seat in (0, 1):
        assert re.search(
            rf"final tic_tac_toe seat {seat}: blunders \d+/\d+, loses to perfect play [01]\.\d\d",
            out,
        )
    assert "final eval tic_tac_toe vs random" in out


def test_ranked_games_log_mean_return_rank_and_cooperation_not_non_losing():
    from training.console_lines import step_line

    ranked = {
        "game": "public_goods",
        "opponent": "tit_for_tat",
        "non_losing": None,
        "ci_low": None,
        "ci_high": None,
        "mean_return": 108.4,
        "return_ci": [80.3, 136.5],
        "rank": 3.62,
        "cooperation": 0.51,
    }
    scored = {
        "game": "tic_tac_toe",
        "opponent": "random",
        "non_losing": 0.9,
        "ci_low": 0.8,
        "ci_high": 0.95,
    }
    line = step_line(3, {}, [ranked, scored])
    assert (
        "eval public_goods vs tit_for_tat: mean return 108 [80.3, 136], rank 3.62, cooperation 0.51"
        in line
    )
    assert "eval tic_tac_toe vs random: non-losing 0.900 [0.800, 0.950]" in line


def _match_step(**extra) -> dict:
    return {
        "reward": 0.1,
        "invalid_rate": 0.0,
        "response_length": 12.0,
        "approx_kl_behaviour": 0.0,
        "entropy": 3.1,
        "clip_frac": 0.0,
        "rollout_tokens_per_s": 900.0,
        "learn_tokens_per_s": 200.0,
        "step_seconds": 170.0,
        **extra,
    }


def test_a_step_trained_with_a_kl_to_the_reference_prints_it_beside_the_behaviour_kl():
    from training.console_lines import step_line

    line = step_line(4, _match_step(kl_ref=0.0213), [])
    assert "kl 0.0000  kl_ref 0.0213  ent 3.100" in line
    assert "kl_ref" not in step_line(4, _match_step(), [])
