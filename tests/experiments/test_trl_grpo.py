"""The TRL recipe (experiments/trl_tictactoe/grpo.py): GRPO through the OpenEnv environment,
its games recorded, and the checkpoint it saves playing an arena tournament."""

from collections import Counter

import pytest
import torch
import yaml

from agents.models import load_model
from cli.main import main as arena_main
from core.records import read_jsonl
from experiments.trl_tictactoe import grpo
from tournaments.run import load_tournament


def test_a_constrained_reply_is_a_legal_move_with_the_models_log_probabilities():
    torch.manual_seed(0)
    model, tok = load_model("tiny-llama", dtype="float32", device="cpu")
    ids = grpo.chat_ids(tok, "Board: . . . . X . . . .\nLegal moves: 0 1 2")
    for _ in range(5):
        new, lps = grpo.legal_reply(model, tok, ids, ["0", "1", "2"])
        assert tok.decode(new, skip_special_tokens=True) in ("0", "1", "2")
        assert new[-1] == tok.eos_token_id
        with torch.no_grad():  # one forward pass over prompt + reply, independently
            logits = model(torch.tensor([ids + new])).logits[0, len(ids) - 1 : -1]
        expected = torch.log_softmax(logits, -1)[torch.arange(len(new)), new]
        assert torch.allclose(torch.tensor(lps), expected, atol=1e-5)


@pytest.mark.slow
def test_grpo_through_openenv_then_the_checkpoint_plays_a_tournament(tmp_path):
    out = tmp_path / "trl"
    grpo.main(["--steps", "2", "--games", "8", "--generations", "4", "--out", str(out)])
    records = list(read_jsonl(out / "episodes.jsonl"))
    assert len(records) == 16 and all("trl" in r.seats.values() for r in records)
    assert set(Counter(r.seed for r in records).values()) == {4}  # a group replays one match
    config = tmp_path / "t.yaml"
    model = {"type": "llm", "model": str(out / "model"), "constrained": True, "prompt": "state",
             "system_prompt": "Tic-tac-toe."}  # fmt: skip
    config.write_text(yaml.safe_dump({
        "name": "trl", "format": "round_robin", "players": {"trl": model, "random": "random"},
        "games": [{"name": "tic_tac_toe", "params": {"board": "relative"}}], "games_per_pairing": 4,
    }))  # fmt: skip
    db = tmp_path / "t.db"
    assert arena_main(["tournament", str(config), "--db", str(db)]) == 0
    result = load_tournament(db)
    assert set(result.ratings) == {"trl", "random"} and len(result.results) == 4
