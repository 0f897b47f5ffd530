"""A small real tournament of bots, played once through `arena tournament`, for the web tests."""

import shutil
from pathlib import Path

import pytest
import yaml

from cli.main import main as arena_main

CONFIG = {
    "name": "web test",
    "format": "round_robin",
    "players": {
        "random": "random",
        "random2": "random",
        "mcts": {"by_game": {"tic_tac_toe": "mcts:10", "default": "random"}},
    },
    "games": [
        "tic_tac_toe",
        "connect_four",
        {"name": "prisoners_dilemma", "params": {"rounds": 3}},
    ],
    "games_per_pairing": 2,
    "rating": {"reference": "random"},
}
MATCHES = 3 * 2 * 3  # 3 pairings, 2 games each, 3 game types


@pytest.fixture(scope="session")
def played(tmp_path_factory) -> Path:
    """The runs folder of the tournament, played once; tests copy it before changing it."""
    root = tmp_path_factory.mktemp("played")
    config = root / "web.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    db = root / "runs" / "web_test" / "tournament.db"
    assert arena_main(["tournament", str(config), "--db", str(db)]) == 0
    return root / "runs"


@pytest.fixture
def runs(played, tmp_path) -> Path:
    """A copy of the played runs folder, for a test to change."""
    out = tmp_path / "runs"
    shutil.copytree(played, out)
    return out


DB = "web_test/tournament.db"
