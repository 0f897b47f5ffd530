"""experiments.kuhn_magnet.seeds: a run its time guard stopped before its last step is not scored."""

import json

import pytest
import yaml

from experiments.kuhn_magnet.seeds import check_finished


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
