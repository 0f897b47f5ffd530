"""core.overrides: `--set` / `--param` KEY=VALUE flags, read as YAML, dotted keys nested, merged into a config."""

import pytest

from core.overrides import game_params, merge, parse_overrides


def test_set_items_nest_dotted_keys_and_read_values_as_yaml():
    got = parse_overrides(
        [
            "steps=3",
            "learner.lr=1e-4",
            "learner.loss.kl_coef=0.1",
            "league.bots=[random, mcts:25]",
            "eval.keep_best=false",
            "model=tiny-llama:hidden=128",
            "run_dir=runs/x=y",
        ]
    )
    assert got == {
        "steps": 3,
        "learner": {"lr": 1e-4, "loss": {"kl_coef": 0.1}},
        "league": {"bots": ["random", "mcts:25"]},
        "eval": {"keep_best": False},
        "model": "tiny-llama:hidden=128",
        "run_dir": "runs/x=y",
    }
    assert parse_overrides(["a=-2E3", "b=.5e+1", "c=1.0e-3", "d=2e", "e=e5"]) == {
        "a": -2000.0,
        "b": 5.0,
        "c": 1e-3,
        "d": "2e",
        "e": "e5",
    }
    assert parse_overrides(["steps=1", "steps=2"]) == {"steps": 2}  # the last one wins
    assert parse_overrides(None) == {}


@pytest.mark.parametrize(
    "items, message",
    [
        (["x"], "--set takes KEY=VALUE, got 'x'"),
        (["=3"], "--set takes KEY=VALUE, got '=3'"),
        (["lr=[1"], "--set lr: '[1' is not a YAML value"),
        (
            ["learner=1", "learner.lr=2"],
            "--set learner.lr: learner was set to a value, so it has no keys",
        ),
    ],
)
def test_malformed_set_items_are_one_line_errors(items, message):
    with pytest.raises(ValueError) as e:
        parse_overrides(items)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_merge_replaces_keys_at_any_depth_and_leaves_its_inputs_alone():
    base = {
        "steps": 5,
        "learner": {"lr": 1.0, "loss": {"kl_coef": 0.0, "entropy_coef": 0.01}},
        "games": ["tic_tac_toe"],
    }
    over = parse_overrides(["learner.loss.kl_coef=0.2", "games=[kuhn_poker]"])
    assert merge(base, over) == {
        "steps": 5,
        "learner": {"lr": 1.0, "loss": {"kl_coef": 0.2, "entropy_coef": 0.01}},
        "games": ["kuhn_poker"],
    }
    assert base["learner"]["loss"]["kl_coef"] == 0.0 and over == {
        "learner": {"loss": {"kl_coef": 0.2}},
        "games": ["kuhn_poker"],
    }


def test_game_params_read_values_alike_and_keep_keys_flat():
    assert game_params(["rounds=3", "T=7.5", "noise=1e-2", "board=relative", "a.b=1"]) == {
        "rounds": 3,
        "T": 7.5,
        "noise": 0.01,
        "board": "relative",
        "a.b": 1,
    }
    assert game_params(None) == {}
    with pytest.raises(ValueError, match="^--param takes KEY=VALUE, got 'rounds'$"):
        game_params(["rounds"])
