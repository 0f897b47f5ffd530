"""The reciprocity study's pieces on scripted agents with hand-computed figures, and one
tiny end-to-end run (train 1 step, evaluate, table, figure)."""

import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from agents import make_agent
from arena.runner import MatchPlan, play
from evaluation.run import play_suite
from evaluation.social import replay
from evaluation.suites import EvalGame
from experiments.reciprocity.reciprocity_study import (
    OPPONENTS,
    Memory1,
    figure,
    main,
    markdown,
    memory1_state,
    memory1_states,
    summarise,
    tabular_learning,
    train_config,
)
from training.advantages import AdvantageConfig


def scripted(strategy: str):
    records = list(
        play_suite(
            {"agent": make_agent(strategy)},
            [EvalGame("prisoners_dilemma", opponents=list(OPPONENTS))],
            matches=4,
        )
    )
    return summarise(records, strategy, 0, 0.0, 0)


def test_summary_of_scripted_strategies_matches_hand_computed_payoffs():
    tft, coop, defect = (
        scripted("tit_for_tat"),
        scripted("always_cooperate"),
        scripted("always_defect"),
    )
    assert tft.mutual_defection == 10.0  # P=1 for 10 rounds
    # tit_for_tat: cooperates with itself throughout, once against always_defect (0 + 9 x 1)
    assert (tft.coop_tft, tft.coop_self, tft.payoff_tft, tft.payoff_ad) == (1.0, 1.0, 30.0, 9.0)
    assert (
        tft.reciprocity == 1.0 and coop.reciprocity == 0.0
    )  # pooled: after always_defect's D, after tit_for_tat's C
    assert tft.not_exploited  # concedes exactly one round: the margin
    assert coop.payoff_ad == 0.0 and not coop.not_exploited
    assert (defect.coop_tft, defect.payoff_tft, defect.payoff_ad, defect.not_exploited) == (
        0.0,
        5.0 + 9,
        10.0,
        True,
    )
    assert tft.coop_tft_ci == pytest.approx((1.0, 1.0))


def test_the_probe_tells_tit_for_tat_from_grim_trigger():
    # without the probe neither ever reaches DC (own D, other C) in these matches
    tft, grim = scripted("tit_for_tat"), scripted("grim_trigger")
    # tit-for-tat answers the probe's round-2 defection, then cooperates after DC: 1, 1, 0, 1, 0
    assert [tft.profile[s][0] for s in ("first", "CC", "CD", "DC", "DD")] == [1, 1, 0, 1, 0]
    assert (tft.nearest, tft.nearest_distance) == ("tit_for_tat", 0.0)
    # grim trigger never cooperates again: 0 after DC
    assert [grim.profile[s][0] for s in ("first", "CC", "CD", "DC", "DD")] == [1, 1, 0, 0, 0]
    assert (grim.nearest, grim.nearest_distance) == ("grim_trigger", 0.0)


def test_mutual_defection_follows_a_random_horizon_match_by_match():
    params = {"random_horizon": "geometric", "rounds": 10}
    records = list(
        play_suite(
            {"agent": make_agent("tit_for_tat")},
            [EvalGame("prisoners_dilemma", params=params, opponents=list(OPPONENTS))],
            matches=8,
        )
    )
    r = summarise(records, "tit_for_tat", 0, 0.0, 0)
    ad = [rec for rec in records if "always_defect" in rec.seats.values()]
    lengths = [len(rec.turns) // 2 for rec in ad]
    assert len(set(lengths)) > 1  # the horizon was drawn per match
    assert r.mutual_defection == pytest.approx(sum(lengths) / len(lengths))
    assert (
        r.payoff_ad == pytest.approx(r.mutual_defection - 1) and r.not_exploited
    )  # tit-for-tat concedes one round


def test_table_and_figure(tmp_path):
    rows = [scripted("tit_for_tat"), scripted("always_defect")]
    table = markdown(rows)
    assert (
        "| tit_for_tat | 0 | 1.00 [1.00, 1.00] | 1.00 [1.00, 1.00] | +1.00 |" in table
        and "| **always_defect** | mean of 1 |" in table
    )
    figure(rows, tmp_path / "fig.png")
    assert (tmp_path / "fig.png").stat().st_size > 1000


def test_train_config_replaces_only_estimator_seed_and_folder(tmp_path):
    aa = train_config("experiments/reciprocity/train_ipd_aa.yaml", "mars", 12, tmp_path / "r")
    mars = train_config("experiments/reciprocity/train_ipd_mars.yaml", "mars", 12, tmp_path / "r")
    assert (aa.advantage.estimator, aa.seed, aa.run_dir) == ("mars", 12, str(tmp_path / "r"))
    assert aa == mars  # the two shipped configs differ only in the estimator


def test_set_overrides_reach_every_run_and_a_bad_key_fails_before_training(tmp_path, capsys):
    floor = train_config(
        "experiments/reciprocity/train_ipd_aa_floor.yaml",
        "mars",
        10,
        tmp_path / "r",
        150,
        {"learner": {"loss": {"floor_decay_steps": 0}}},
    )
    assert (floor.learner.loss.floor_decay_steps, floor.learner.loss.floor_coef, floor.steps) == (
        0,
        0.3,
        150,
    )
    assert (
        floor.learner.lr == 1e-3 and floor.advantage.estimator == "mars"
    )  # the rest of the file stays
    with pytest.raises(SystemExit):
        main(
            [
                "--config",
                "experiments/reciprocity/train_ipd_aa_floor.yaml",
                "--set",
                "learner.loss.floor_decay_stepz=0",
                "--out",
                str(tmp_path / "o"),
            ]
        )
    assert "did you mean 'floor_decay_steps'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--config", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "o")])
    assert "missing.yaml not found" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing created, nothing trained


def test_the_ipd_runs_first_minibatch_is_on_policy(tmp_path, monkeypatch):
    """The contract of a PPO step on the study's path: the shipped config (the mars one
    differs in its estimator only, test above; state prompt,
    constrained Cooperate/Defect, bf16 on a CPU with native bf16, self-play and the random bot, two
    minibatches): the rollout recorded every policy turn's prompt tokens and behaviour logprobs, the
    learner's recomputation from the initial weights gives the same logprobs (to bf16 rounding),
    and the step's first minibatch has ratio 1 and clips nothing."""
    from agents.models import load_model
    from core.records import read_json_lines
    from training import selfplay
    from training.config import POLICY
    from training.learner import Learner
    from training.sequences import TrainingSequence

    played = []

    def recording_play(*args, **kwargs):  # the step's matches, as the loop plays them
        for rec in real_play(*args, **kwargs):
            played.append(rec)
            yield rec

    import training.rollouts as rollouts

    real_play = rollouts.play
    monkeypatch.setattr(rollouts, "play", recording_play)  # what the loop's play_step calls
    cfg = selfplay.load_config(
        "experiments/reciprocity/train_ipd_aa.yaml",
        {"steps": 1, "matches_per_step": 4, "concurrency": 4, "run_dir": str(tmp_path / "run")},
    )
    selfplay.train(cfg, console=Console(quiet=True))
    row = next(read_json_lines(tmp_path / "run" / "metrics.jsonl"))
    model, tok = load_model(cfg.model, dtype="float32")  # the weights the rollout played with
    learner = Learner(model, tok, cfg.learner)
    tol = 1e-4 if learner.compute_dtype == "float32" else 2e-2
    assert abs(row["first_ratio_min"] - 1) < tol and abs(row["first_ratio_max"] - 1) < tol, row
    assert row["first_clip_frac"] == 0.0 and row["first_approx_kl_behaviour"] < tol**2, row
    turns = [t for rec in played for t in rec.turns if t.agent == POLICY]
    assert turns and all(
        t.prompt_token_ids and t.constrained and len(t.logprobs) == len(t.token_ids) for t in turns
    )
    recomputed = learner.logprobs(
        [TrainingSequence(t.prompt_token_ids, t.token_ids, 0.0) for t in turns]
    )  # full vocabulary, as recorded
    worst = max(abs(a - b) for t, new in zip(turns, recomputed) for a, b in zip(t.logprobs, new))
    assert worst < tol, worst


@pytest.mark.slow
def test_end_to_end_tiny_study(tmp_path):
    cfg = tmp_path / "ipd.yaml"
    text = (
        open("experiments/reciprocity/train_ipd_aa.yaml")
        .read()
        .replace("matches_per_step: 32", "matches_per_step: 4")
        .replace("concurrency: 32", "concurrency: 4")
    )
    cfg.write_text(text)
    results = main(
        [
            "--config",
            str(cfg),
            "--seeds",
            "3",
            "--steps",
            "1",
            "--matches",
            "4",
            "--out",
            str(tmp_path / "out"),
            "--figure",
            str(tmp_path / "fig.png"),
        ]
    )
    assert [r.estimator for r in results] == ["advantage_alignment", "mars"]
    assert all(0 <= r.coop_tft <= 1 and 0 <= r.payoff_ad <= 50 for r in results)
    # the constrained policy's own distributions give its profile, which names a strategy
    assert all(
        r.profile_method == "exact" and r.nearest and 0 < r.profile["first"][0] < 1 for r in results
    )
    saved = json.loads((tmp_path / "out" / "reciprocity.json").read_text())
    assert len(saved) == 2 and (tmp_path / "out" / "reciprocity.md").read_text().count("\n") == 6
    assert (tmp_path / "fig.png").stat().st_size > 0 and not (
        tmp_path / "out" / "reciprocity.png"
    ).exists()
    again = main(
        [
            "--config",
            str(cfg),
            "--seeds",
            "3",
            "--steps",
            "1",
            "--matches",
            "4",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert [r.coop_tft for r in again] == [
        r.coop_tft for r in results
    ]  # finished runs are not trained again
    assert (
        tmp_path / "out" / "reciprocity.png"
    ).stat().st_size > 0  # the figure's default: in OUT, never the README's
    longer = main(
        [
            "--config",
            str(cfg),
            "--seeds",
            "3",
            "--steps",
            "2",
            "--matches",
            "4",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert [r.steps for r in longer] == [
        2,
        2,
    ]  # asked for more steps: the runs resume from their checkpoints
    with pytest.raises(ValueError, match="holds a 2-step run"):
        main(
            [
                "--config",
                str(cfg),
                "--seeds",
                "3",
                "--steps",
                "1",
                "--matches",
                "4",
                "--out",
                str(tmp_path / "out"),
            ]
        )


def test_advantage_alignment_credits_retaliation_that_the_own_advantage_blames():
    """Hand example behind the study: two IPD matches on one seed (one group). In A the
    learner (tit-for-tat moves) meets always-defect: exploited in round 1, it defects from
    round 2. In B it meets tit-for-tat: all Cooperate. Raw points, gamma 1.
    Round 2 of A, the learner's retaliation: own LOO advantage A1_1 = 9 - 27 = -18 (it is
    blamed: B earned more), past A1_0 = 9 - 30 = -21, the opponent's A2_1 = 9 - 27 = -18, so
    A*_1 = g [A1_1 + beta g (g A1_0) A2_1] = 0.96 (-18 + 2 0.96 0.96 21 18) > 0 in the raw
    equation. Normalised (the default), the same with every advantage divided by their std s
    over the batch: 0.96 (-18/s + 2 0.96 0.96 21 18 / s^2), still > 0 while s < 2 0.96^2 21."""
    from arena.runner import MatchPlan, play
    from training.advantages import AdvantageConfig, _flatten, _loo_by_decision, compute_advantages

    plans = [
        MatchPlan("A", "prisoners_dilemma", ["learner", "always_defect"], 0, {}),
        MatchPlan("B", "prisoners_dilemma", ["learner", "tit_for_tat"], 0, {}),
    ]
    agents = {
        "learner": make_agent("tit_for_tat", name="learner"),
        "always_defect": make_agent("always_defect"),
        "tit_for_tat": make_agent("tit_for_tat"),
    }
    records = sorted(play(plans, agents), key=lambda r: r.match_id)
    raw = dict(
        reward_scale=1.0, format_reward=0.0, draw_reward=0.0, gamma=1.0, learners=["learner"]
    )
    aa = compute_advantages(
        records,
        AdvantageConfig(
            estimator="advantage_alignment", aa_beta=2.0, aa_gamma=0.96, aa_normalize=False, **raw
        ),
    )
    own = compute_advantages(records, AdvantageConfig(estimator="loo", **raw))
    retaliation = [
        (s.advantage, o.advantage)
        for s, o in zip(aa, own)
        if s.match_index == 0 and s.turn.action == 1
    ]
    first = retaliation[0]
    assert first[1] == pytest.approx(-18.0)
    assert first[0] == pytest.approx(0.96 * (-18 + 2 * 0.96 * 0.96 * 21 * 18))

    every = [
        a
        for key, a in sorted(
            _loo_by_decision(
                _flatten(records, AdvantageConfig(**raw)), AdvantageConfig(**raw)
            ).items()
        )
    ]
    s = (
        np.std(every, ddof=1) + 1e-6
    )  # the loo advantages of both seats, mean 0 (two matches in one group)
    normalised = compute_advantages(
        records, AdvantageConfig(estimator="advantage_alignment", aa_beta=2.0, aa_gamma=0.96, **raw)
    )
    first_normalised = next(
        x.advantage for x in normalised if x.match_index == 0 and x.turn.action == 1
    )
    assert (
        first_normalised == pytest.approx(0.96 * (-18 / s + 2 * 0.96 * 0.96 * 21 * 18 / s**2))
        and first_normalised > 0
    )


def test_state_gradients_advantage_alignment_teaches_reciprocity_in_self_play_mars_does_not():
    """Memory-1 players cooperating 60% whatever happened, in self-play: per state, the update a
    tabular policy would get. Advantage Alignment pushes cooperation after the other's C
    relative to after its D (raw: up after C, down after D); mars and loo are blind to the
    state (defection pays in both)."""
    from experiments.reciprocity.reciprocity_study import state_gradients
    from training.advantages import AdvantageConfig

    raw = dict(reward_scale=1.0, format_reward=0.0, draw_reward=0.0)
    configs = {
        "aa": AdvantageConfig(estimator="advantage_alignment", **raw),
        "aa_raw": AdvantageConfig(estimator="advantage_alignment", aa_normalize=False, **raw),
        "mars": AdvantageConfig(estimator="mars", **raw),
        "loo": AdvantageConfig(estimator="loo", **raw),
    }
    g = state_gradients({"first": 0.6, "C": 0.6, "D": 0.6}, "self", configs, matches=400, seed=3)
    assert g["aa_raw"]["C"] > 0 > g["aa_raw"]["D"]
    assert g["aa"]["C"] - g["aa"]["D"] > 0.03
    assert g["mars"]["C"] < 0 and g["mars"]["D"] < 0 and abs(g["mars"]["C"] - g["mars"]["D"]) < 0.03
    assert g["loo"]["C"] < 0 and g["loo"]["D"] < 0


def test_tabular_learning_advantage_alignment_reaches_tit_for_tat_mars_defects():
    """A tabular memory-1 policy (nothing shared between states) trained in self-play: Advantage
    Alignment ends cooperating after the other's C and defecting after its D; mars defects in both."""
    from experiments.reciprocity.reciprocity_study import tabular_learning
    from training.advantages import AdvantageConfig

    raw = dict(reward_scale=1.0, format_reward=0.0, draw_reward=0.0)
    aa = tabular_learning(
        AdvantageConfig(estimator="advantage_alignment", aa_beta=2.0, aa_gamma=0.96, **raw),
        iterations=10,
        matches=100,
        lr=0.7,
        seed=1,
    )
    mars = tabular_learning(
        AdvantageConfig(estimator="mars", **raw), iterations=10, matches=100, lr=0.7, seed=1
    )
    assert aa[0] == {"first": 0.5, "C": 0.5, "D": 0.5}
    assert aa[-1]["C"] > 0.7 and aa[-1]["D"] < 0.2
    assert mars[-1]["C"] < 0.3 and mars[-1]["D"] < 0.3


def test_tabular_learning_in_trust_and_split_advantage_alignment_reaches_tit_for_tat():
    """Trust-and-Split with both hands shown: the tabular memory-1 policy (the losing hand claims
    0 or every coin) trained by Advantage Alignment cooperates first and after the other's
    cooperation and retaliates after its defection; mars defects first and after a defection."""
    from experiments.reciprocity.reciprocity_study import tabular_learning
    from training.advantages import AdvantageConfig

    raw = dict(reward_scale=0.1, format_reward=0.0, draw_reward=0.0)
    params = {"rounds": 5, "messages": "reveal", "state_rounds": 1, "state_progress": False}
    run = dict(iterations=10, matches=100, lr=0.7, seed=1, game="trust_and_split", params=params)
    aa = tabular_learning(
        AdvantageConfig(estimator="advantage_alignment", aa_past="causal", **raw), **run
    )
    mars = tabular_learning(AdvantageConfig(estimator="mars", **raw), **run)
    assert aa[-1]["first"] > 0.8 and aa[-1]["C"] > 0.9 and aa[-1]["D"] < 0.1
    assert mars[-1]["first"] < 0.3 and mars[-1]["D"] < 0.2


def test_decisions_in_trust_and_split_count_only_the_losing_hands_claims():
    """With both hands shown, cooperating and defecting differ only for the losing hand (claim 0
    or every coin): the winning hand's turns are no decision; the state is the other's last move
    (it defected iff it lost and claimed more than half)."""
    import games
    from core.records import MatchRecord, TurnRecord
    from experiments.reciprocity.reciprocity_study import decisions

    params = {"rounds": 3, "messages": "reveal"}
    env = games.make("trust_and_split", **params)
    env.reset(seed=5)
    loser_claims = [10, 0, 4]  # round 1 the loser defects, then cooperates (4 is not over half)
    rec = MatchRecord("m", "trust_and_split", params, 5, {"player_0": "a", "player_1": "a"})
    losers = []
    for r, claim in enumerate(loser_claims):
        loser = 0 if env.value(0) < env.value(1) else 1
        losers.append(loser)
        for p in (0, 1):
            action = claim if p == loser else 10
            rec.turns.append(TurnRecord(2 * r + p, f"player_{p}", "a", str(action), action))
            env.step(action)
    states, moves = decisions(rec)
    expected_moves = []
    for r, claim in enumerate(loser_claims):
        expected_moves += [(claim == 0) if p == losers[r] else None for p in (0, 1)]
    assert moves == expected_moves
    # after round 1 the round-1 winner saw a defection (D), the loser a cooperation (C)
    assert states[:2] == ["first", "first"]
    assert states[2 + losers[0]] == "C" and states[2 + 1 - losers[0]] == "D"
    assert states[4:] == ["C", "C"]  # round 2's loser claimed 0: both saw a cooperation


def test_memory1_state_by_the_others_move_or_by_both_moves():
    """`cooperation_history` rows are (own move, the others' moves); the state is `first` before
    any round, else the other's last move, or with own_move both last moves, own first."""
    history = [(True, (True,)), (False, (True,)), (True, (False,))]
    assert memory1_state([]) == "first" and memory1_state([], own_move=True) == "first"
    assert [memory1_state(history[: k + 1]) for k in range(3)] == ["C", "C", "D"]
    assert [memory1_state(history[: k + 1], own_move=True) for k in range(3)] == [
        "CC",
        "DC",
        "CD",
    ]


def test_memory1_state_counted_names_how_many_others_cooperated():
    """With `counted` the state is the number of the others who cooperated last round, one
    state per count from none to all (four-player public goods: 0 .. 3)."""
    history = [(True, (True, False, True)), (False, (False, False, False))]
    assert memory1_state([], counted=True) == "first"
    assert [memory1_state(history[: k + 1], counted=True) for k in range(2)] == ["2", "0"]
    assert memory1_states(counted=True, game="public_goods") == ("first", "0", "1", "2", "3")
    assert memory1_states() == ("first", "C", "D")


def test_tabular_learning_with_own_move_has_five_states_and_memory1_plays_them():
    """With own_move the tabular policy has a logit for the first round and for each of the last
    round's CC, CD, DC, DD (all 0: p = 0.5 before training), and a Memory1 player whose p is 1
    after DC and 0 elsewhere (alternation) against tit-for-tat defects in round one, then
    alternates: C, D, C, ... (tit-for-tat copies its move, so it sees DC, CD, DC, ...)."""
    raw = dict(reward_scale=1.0, format_reward=0.0, draw_reward=0.0)
    history = tabular_learning(
        AdvantageConfig(estimator="mars", **raw), iterations=1, matches=20, own_move=True
    )
    assert history[0] == {"first": 0.5, "CC": 0.5, "CD": 0.5, "DC": 0.5, "DD": 0.5}
    assert set(history[1]) == set(history[0])

    alternation = Memory1({"first": 0.0, "CC": 0.0, "CD": 0.0, "DC": 1.0, "DD": 0.0}, own_move=True)
    tft = make_agent("tit_for_tat")
    agents = {alternation.name: alternation, tft.name: tft}
    (record,) = play([MatchPlan("m", "prisoners_dilemma", [alternation.name, tft.name], 0)], agents)
    seat = next(s for s, name in record.seats.items() if name == alternation.name)
    moves = replay(record).cooperation_history(seat)
    assert [mine for mine, _ in moves] == [k % 2 == 1 for k in range(len(moves))]
    assert [others[0] for _, others in moves] == [k % 2 == 0 for k in range(len(moves))]


@pytest.mark.slow  # ~1-3 minutes on 2 cores
def test_supervised_tit_for_tat_the_tiny_model_reads_the_others_last_move():
    """The IPD config's tiny Llama, fitted by cross-entropy to tit-for-tat's replies on its own
    prompts, plays tit-for-tat's move on held-out turns after 30 Adam steps, after the other's C
    (Cooperate) and after its D (Defect) alike: the policy can condition on the last move."""
    from experiments.reciprocity.reciprocity_study import supervised_tit_for_tat

    rows = supervised_tit_for_tat("experiments/reciprocity/train_ipd_aa.yaml", steps=30, every=30)
    assert rows[0]["p"]["C"] < 0.7 and rows[0]["p"]["D"] < 0.7  # not there at initialisation
    assert rows[-1]["step"] == 30 and rows[-1]["p"]["C"] > 0.9 and rows[-1]["p"]["D"] > 0.9


@pytest.mark.slow  # ~1-2 minutes on 2 cores
def test_supervised_tit_for_tat_in_trust_and_split_saves_a_warm_start(tmp_path):
    """Trust-and-Split with both hands shown: the fit plays tit-for-tat's claim (0 with the losing
    hand after the other's cooperation, every coin after its defection) on held-out turns, and the
    saved folder is a model a config starts from, with the fitted weights."""
    from experiments.reciprocity.reciprocity_study import supervised_tit_for_tat

    config = "experiments/trust_and_split/train_tas_aa_reveal.yaml"
    rows = supervised_tit_for_tat(config, steps=80, every=80, save=tmp_path / "fit")
    assert rows[0]["p"]["C"] < 0.5 and rows[0]["p"]["D"] < 0.5
    assert all(p > 0.9 for p in rows[-1]["p"].values()) and "no choice" in rows[-1]["p"]
    # the saved folder, loaded as a config's model, plays tit-for-tat's claims: losing in round 2,
    # it claims nothing after the other's cooperation and every coin after its defection
    from dataclasses import replace

    import games
    from agents.base import PendingTurn
    from agents.llm_agent import LLMAgent
    from agents.models import load_model
    from agents.transformers_backend import TransformersBackend
    from training.config import load_config

    cfg = load_config(config, {"model": str(tmp_path / "fit")})
    model, tok = load_model(cfg.model, dtype="float32", device="cpu")
    agent = LLMAgent("fit", TransformersBackend((model, tok)), replace(cfg.agent, temperature=0.0))
    claims = {}
    for other_claim in (0, 10):
        env = games.make("trust_and_split", **cfg.games[0].params)
        env.reset(seed=0, options={"hands": [("rock", "scissors"), ("rock", "paper")]})
        env.step(10)  # round 1: player_0's rock wins and takes every coin
        env.step(other_claim)  # player_1's scissors lose: 0 cooperates, 10 defects
        (rec,) = agent.act([PendingTurn("m", env, "player_0", np.random.default_rng(0))])
        claims[other_claim] = rec.action
    assert claims == {0: 0, 10: 10}


def test_by_round_splits_the_profile_by_round(tmp_path):
    """Two hand-written 3-round matches against tit_for_tat: the agent cooperates, then defects
    in round 2 of one match; P(C) per (state, round) is the mean of its own probabilities there."""
    from experiments.reciprocity.by_round import by_round

    def turn(agent, player, action, p_c=None):
        t = {"agent": agent, "player": player, "action": action}
        if p_c is not None:
            t["action_probs"] = [[0, p_c], [1, 1 - p_c]]
        return t

    def record(agent_moves, probs):
        turns, tft = [], 0
        for a, p in zip(agent_moves, probs):
            turns += [turn("agent", "player_0", a, p), turn("tit_for_tat", "player_1", tft)]
            tft = a  # tit-for-tat copies the agent's last move
        return {"seats": {"player_0": "agent", "player_1": "tit_for_tat"}, "turns": turns}

    log = tmp_path / "eval.jsonl"
    log.write_text(
        "\n".join(
            json.dumps(r)
            for r in (record([0, 0, 0], [0.9, 0.8, 0.7]), record([0, 1, 0], [0.9, 0.6, 0.3]))
        )
    )
    got = by_round(log)
    assert got[("tit_for_tat", "first", 1)] == [0.9, 0.9]
    assert got[("tit_for_tat", "CC", 2)] == [0.8, 0.6]
    assert got[("tit_for_tat", "CC", 3)] == [0.7]  # match 1: both cooperated in round 2
    assert got[("tit_for_tat", "DC", 3)] == [0.3]  # match 2: it defected, tit-for-tat cooperated


def test_tabular_learning_in_four_player_public_goods_reciprocity_after_round_one_only():
    """4-player public goods, every seat the learner (contribute all or nothing; `C`: every other
    player contributed last round). Advantage Alignment with the others' advantages summed
    learns to contribute after `C` and keep after `D`, but the first round, where no shaping
    term exists, decays to keeping; mars keeps everywhere."""
    from experiments.reciprocity.reciprocity_study import tabular_learning
    from training.advantages import AdvantageConfig

    raw = dict(reward_scale=1.0, format_reward=0.0, draw_reward=0.0)
    params = {"state_rounds": 1, "state_progress": False}
    run = dict(iterations=10, matches=100, lr=0.7, seed=1, game="public_goods", params=params)
    aa = tabular_learning(
        AdvantageConfig(estimator="advantage_alignment", aa_past="causal", aa_others="sum", **raw),
        **run,
    )
    mars = tabular_learning(AdvantageConfig(estimator="mars", **raw), **run)
    assert aa[-1]["C"] > 0.8 and aa[-1]["D"] < 0.2 and aa[-1]["first"] < 0.2
    assert mars[-1]["C"] < 0.3 and mars[-1]["D"] < 0.2 and mars[-1]["first"] < 0.2


def test_tabular_learning_starts_where_asked_and_refuses_an_unknown_state():
    from experiments.reciprocity.reciprocity_study import starting_point, tabular_learning
    from training.advantages import AdvantageConfig

    adv = AdvantageConfig(estimator="mars", reward_scale=1.0, format_reward=0.0, draw_reward=0.0)
    start = starting_point(["first=0.9", "D=0.2"])
    history = tabular_learning(adv, iterations=1, matches=10, start=start)
    assert history[0] == pytest.approx({"first": 0.9, "C": 0.5, "D": 0.2})
    with pytest.raises(ValueError, match="--start: the states are first, C, D"):
        tabular_learning(adv, iterations=1, matches=10, start={"CC": 0.9})
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        starting_point(["first=1"])


def test_graded_tit_for_tat_examples_answer_the_least_contribution_from_every_seat():
    """Public goods with a memory-1 prompt: `graded` targets are the least amount another player
    put in last round (everything in round one), read back from the prompt's own line;
    `every_seat` takes the examples from seats other than the first (their prompts name
    player_0 among the others), the default from the first seat only."""
    import re

    from experiments.reciprocity.reciprocity_study import tit_for_tat_examples, train_config
    from experiments.supervised_bound.supervised_bound import fresh_policy

    config = "experiments/public_goods/train_pg_aa_reciprocal.yaml"
    cfg = train_config(config, "mars", 0, Path("unused"))
    _, tok, _, agent = fresh_policy(cfg)
    game = cfg.games[0]
    examples = tit_for_tat_examples(agent, tok, game.name, game.params, 8, 0, True, True)
    targets = set()
    for state, seq in examples:
        prompt, reply = tok.decode(seq.prompt_ids), tok.decode(seq.completion_ids)
        target = int(re.match(r"\d+", reply).group())
        targets.add(target)
        line = re.search(r"contributions: you \d+, (.*?);", prompt)
        if state == "first":
            assert line is None and target == 10
        else:
            others = [int(x) for x in re.findall(r"player_\d (\d+)", line.group(1))]
            assert len(others) == 3 and target == min(others)
    assert len(targets) > 3  # amounts between nothing and everything, not two moves
    names = {tok.decode(seq.prompt_ids).count("player_0") > 0 for _, seq in examples}
    assert names == {True, False}
    first_only = tit_for_tat_examples(agent, tok, game.name, game.params, 8, 0, True)
    assert not any("player_0" in tok.decode(seq.prompt_ids) for _, seq in first_only)
