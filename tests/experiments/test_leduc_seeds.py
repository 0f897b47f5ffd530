"""experiments.kuhn_magnet.seeds: a run its time guard stopped before its last step is not scored;
a scored row records the precision the run trained in; the auto arm differs from the shipped
config in its precision alone; the second half's best and the 10% reading of a run's end."""

import json
from dataclasses import replace

import pytest
import yaml

from core.overrides import parse_overrides
from experiments.kuhn_magnet.seeds import ARMS, check_finished, score, second_half_best
from training.config import load_config


def run_dir(tmp_path, steps: int, logged: int):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"steps": steps, "max_minutes": 1}))
    lines = [json.dumps({"step": s, "minutes": s / 10}) for s in range(1, logged + 1)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_a_run_stopped_short_is_refused_and_a_finished_one_passes(tmp_path):
    short, done = tmp_path / "short", tmp_path / "done"
    short.mkdir()
    done.mkdir()
    with pytest.raises(SystemExit, match="stopped at step 86 of 100"):
        check_finished(run_dir(short, 100, 86))
    check_finished(run_dir(done, 100, 100))


def scored_run(tmp_path):
    """A finished 20-step run folder with its curve and its final evaluation, no checkpoints."""
    run = run_dir(tmp_path, 20, 20)
    (run / "eval.jsonl").write_text(json.dumps({"step": 20, "exploitability": 0.25}) + "\n")
    (run / "final-eval").mkdir()
    gap = {"kind": "exploitability", "exploitability": 0.25, "nash_conv": 0.5}
    (run / "final-eval" / "eval.json").write_text(json.dumps([gap]))
    return run


def test_a_row_records_the_precision_of_the_checkpoint_the_run_ended_on(tmp_path):
    run = scored_run(tmp_path)
    for step, precision in ((10, "float32"), (20, "bfloat16")):
        folder = run / "checkpoints" / f"step_{step:08d}"
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text(json.dumps({"step": step, "precision": precision}))
    row = score(run, ["leduc_poker"])
    assert (row["precision"], row["exploitability"], row["steps"]) == ("bfloat16", 0.25, 20)


def test_a_run_folder_without_checkpoints_scores_with_no_precision(tmp_path):
    assert score(scored_run(tmp_path), ["leduc_poker"])["precision"] is None


def test_the_auto_arm_is_the_shipped_fp32_config_at_precision_auto():
    config, extra = ARMS["leduc_poker"]["cfr_plus_auto"]
    auto = load_config(config, parse_overrides(extra[1::2]))
    shipped = load_config(ARMS["leduc_poker"]["cfr_plus"][0])
    assert extra[0::2] == ["--set"] * (len(extra) // 2)
    assert (shipped.learner.precision, auto.learner.precision) == ("float32", "auto")
    assert (
        replace(auto, learner=replace(auto.learner, precision=shipped.learner.precision)) == shipped
    )


def test_the_second_half_best_ignores_the_first_half_and_reads_the_10_percent_band():
    curve = [{"step": 0, "exploitability": 2.0}, {"step": 40, "exploitability": 0.001}]
    curve += [{"step": 50, "exploitability": 0.010}, {"step": 90, "exploitability": 0.009}]
    curve += [{"step": 100, "exploitability": 0.0095}]
    row = {"exploitability": 0.0095, "nash_conv": 0.019, "steps": 100, "eval": curve}
    assert second_half_best(row) == (0.009, True)  # 0.0095 <= 1.1 x 0.009 = 0.0099
    assert second_half_best({**row, "exploitability": 0.0100}) == (0.009, False)


def test_the_second_half_best_reads_nash_conv_where_exploitability_is_none():
    curve = [{"step": 10, "exploitability": None, "nash_conv": 0.05}]
    curve += [{"step": 20, "exploitability": None, "nash_conv": 0.02}]
    row = {"exploitability": None, "nash_conv": 0.021, "steps": 20, "eval": curve}
    assert second_half_best(row) == (0.02, True)
