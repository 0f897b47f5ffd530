"""The public goods study's measures (experiments/public_goods/study.py), on scripted players
whose results are worked out by hand: 4 seats, endowment 10, multiplier 1.6, 10 rounds."""

import pytest

from agents import make_agent
from experiments.public_goods import study


def test_full_contributors_reach_the_optimum_with_equal_returns():
    """Four unconditional contributors put in everything: each round 10 x 4 x 1.6 / 4 = 16 each,
    160 a seat, 640 in all: welfare 1, Gini 0."""
    out = study.self_play("coop", make_agent("always_cooperate"), 2)
    assert out["contribution"] == [1.0, 1.0]
    assert out["welfare"] == pytest.approx([1.0, 1.0])
    assert out["gini"] == pytest.approx([0.0, 0.0])


def test_a_defector_gains_ten_a_round_from_contributors_and_one_round_from_tit_for_tat():
    """Against three unconditional contributors the defector keeps its 10 and gets 12 from the
    pot (22) while they get 12: 10 a round, 100 over 10 rounds. Tit-for-tat contributes in round
    one only (then someone has defected): a gap of 10 in round one, 0 after (all keep 10)."""
    defector = make_agent("always_defect")
    assert study.exploitation("coop", make_agent("always_cooperate"), defector, 4) == [100.0] * 4
    assert study.exploitation("tft", make_agent("tit_for_tat"), defector, 4) == [10.0] * 4


def test_the_defector_sits_in_every_seat_in_turn():
    records = study.table(
        ["d", "x", "x", "x"],
        {"d": make_agent("always_defect"), "x": make_agent("always_cooperate")},
        4,
        "d",
    )
    seats = sorted(
        (r.match_id, [p for p, who in r.seats.items() if who == "d"][0]) for r in records
    )
    assert [s for _, s in seats] == ["player_0", "player_1", "player_2", "player_3"]


def test_the_fitted_settings_game_is_all_or_nothing_and_scored_on_its_own_scale():
    """The fitted setting's configs play endowment 1 (give 0 or 1) with a memory-1 prompt, the
    two arms one line apart. Four unconditional givers: 1 x 4 x 1.6 / 4 = 1.6 a round each, 64
    in all over 10 rounds: contribution 1 and welfare 1 on that game's scale (not 640's). A
    defector beside three givers keeps 1 and gets 1.2 (2.2) while they get 1.2: 1 a round, 10
    in all; beside tit-for-tat only round one's 1."""
    params = study.game_params(study.SETTINGS["fitted"]["aa"])
    assert params == {"endowment": 1, "state_rounds": 1, "state_progress": False}
    assert study.game_params(study.SETTINGS["fitted"]["mars"]) == params
    aa, mars = (open(study.SETTINGS["fitted"][arm]).read().splitlines() for arm in ("aa", "mars"))
    assert [(a, b) for a, b in zip(aa, mars) if a != b and not a.startswith("#")] == [
        ("run_dir: runs/public_goods_aa_fitted", "run_dir: runs/public_goods_mars_fitted"),
        ("  estimator: advantage_alignment", "  estimator: mars"),
    ]
    out = study.self_play("coop", make_agent("always_cooperate"), 2, params)
    assert out["contribution"] == [1.0, 1.0] and out["welfare"] == pytest.approx([1.0, 1.0])
    defector = make_agent("always_defect")
    coop = study.exploitation("coop", make_agent("always_cooperate"), defector, 2, params)
    assert coop == pytest.approx([10.0, 10.0])
    tft = study.exploitation("tft", make_agent("tit_for_tat"), defector, 2, params)
    assert tft == pytest.approx([1.0, 1.0])


def test_the_summed_settings_arms_differ_in_their_estimator_alone():
    """The summed setting's configs play the all-or-nothing game with the others' contributions
    summed in a memory-1 prompt, in pure self-play, the two arms one line apart."""
    params = study.game_params(study.SETTINGS["summed"]["aa"])
    assert params == {
        "endowment": 1,
        "state_rounds": 1,
        "state_progress": False,
        "others_summed": True,
    }
    aa, mars = (open(study.SETTINGS["summed"][arm]).read().splitlines() for arm in ("aa", "mars"))
    assert [(a, b) for a, b in zip(aa, mars) if a != b and not a.startswith("#")] == [
        ("run_dir: runs/public_goods_aa_summed", "run_dir: runs/public_goods_mars_summed"),
        ("  estimator: advantage_alignment", "  estimator: mars"),
    ]
    assert "  self_play: 1.0           # the policy in all four seats" in aa


def test_the_summed_100_setting_runs_the_summed_configs_shorter():
    """`summed-100` trains the summed configs for 100 steps with the floor over the first 60
    (120 optimizer steps at 2 a step), where `summed` runs them as written: 200 steps, the
    floor over the first 100."""
    from core.overrides import parse_overrides
    from training.config import load_config

    items = study.OVERRIDES["summed-100"][1::2]
    assert study.OVERRIDES["summed-100"][0::2] == ["--set"] * len(items)
    for arm in ("aa", "mars"):
        shipped = load_config(study.SETTINGS["summed"][arm])
        short = load_config(study.SETTINGS["summed-100"][arm], parse_overrides(items))
        assert (shipped.steps, shipped.learner.loss.floor_decay_steps) == (200, 200)
        assert (short.steps, short.learner.loss.floor_decay_steps) == (100, 120)
        assert short.advantage == shipped.advantage and short.games == shipped.games


def test_train_passes_the_settings_overrides(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(study, "train_run", lambda *a: calls.append(a) or a[2])
    study.train("mars", 7, tmp_path, "summed-100")
    study.train("mars", 7, tmp_path, "summed")
    assert calls[0] == (
        "configs/train_public_goods_mars_summed.yaml",
        7,
        tmp_path / "mars-7",
        ["--set", "steps=100", "--set", "learner.loss.floor_decay_steps=120"],
    )
    assert calls[1][3] == []


class _TitForTatProbabilities:
    """Tit-for-tat as exact move distributions: the whole endowment in round one and while
    every other player gave at least half last round, else nothing."""

    def action_probabilities(self, turns):
        out = []
        for t in turns:
            history = t.env.cooperation_history(t.player)
            give = not history or all(history[-1][1])
            out.append({t.env.endowment: float(give), 0: float(not give)})
        return out


@pytest.mark.parametrize("params", [{}, {"endowment": 1, "others_summed": True}])
def test_state_profile_builds_each_last_round_from_every_seat(params):
    """The profile's states are the last rounds they name: tit-for-tat gives at `first` and
    after three givers whatever it did itself, keeps after any keeper; an agent without exact
    distributions has no profile."""
    profile = study.state_profile(_TitForTatProbabilities(), params)
    expected = {"first": 1.0} | {
        f"{m}-{k}": float(k == 3) for m in ("gave", "kept") for k in range(4)
    }
    assert profile == expected
    assert study.state_profile(make_agent("always_defect"), params) == {}
