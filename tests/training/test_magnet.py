"""Magnetic Mirror Descent's magnet term (loss.magnet_coef, learner.magnet_every) and the
exploitability evaluation point (eval.exploitability)."""

import json
import math

import pyspiel
import pytest
import torch

import games
from agents import checkpoint, make_agent
from agents.models import tiny_llama
from evaluation.exploitability import exploitability
from training.learner import Learner
from training.learner_config import LearnerConfig
from training.logprobs import magnet_kl
from training.loss import LossConfig, magnet_coef_at
from training.selfplay import parse_config, train
from training.sequences import TrainingSequence

MOVES = ["Pass", "Bet"]


@pytest.fixture(scope="module")
def tok():
    return tiny_llama(0)[1]


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def kuhn_seqs(tok, advantages=(1.0, -1.0)):
    """Two constrained turns at one prompt: Pass and Bet (one token each, then end of turn)."""
    prompt = ids(tok, "Your card: K (King; Jack < Queen < King).")
    return [
        TrainingSequence(prompt, ids(tok, m) + [tok.eos_token_id], a, allowed=MOVES)
        for m, a in zip(MOVES, advantages)
    ]


def move_probs(learner, seqs, model):
    """Probability of each sequence's move (its first token) under `model` (policy or magnet)."""
    before = learner.policy
    learner.policy = model
    try:
        return [math.exp(lp[0]) for lp in learner.logprobs(seqs)]
    finally:
        learner.policy = before


def test_magnet_kl_over_two_moves_matches_a_hand_computation():
    """pi = (0.8, 0.2), magnet = (0.5, 0.5): KL = 0.8 ln(0.8/0.5) + 0.2 ln(0.2/0.5) = 0.19274;
    a padded third column counts for nothing; one allowed token has KL 0."""
    logq = torch.log(torch.tensor([[0.8, 0.2, 1.0], [1.0, 1.0, 1.0]]))
    logm = torch.log(torch.tensor([[0.5, 0.5, 0.3], [1.0, 0.7, 0.7]]))
    valid = torch.tensor([[True, True, False], [True, False, False]])
    logq, logm = logq.masked_fill(~valid, 0.0), logm.masked_fill(~valid, 0.0)
    kl = magnet_kl(logq, logm, valid)
    assert kl[0].item() == pytest.approx(0.8 * math.log(1.6) + 0.2 * math.log(0.4), abs=1e-6)
    assert kl[0].item() == pytest.approx(0.19274, abs=1e-5)
    assert kl[1].item() == pytest.approx(0.0, abs=1e-7)


def test_learner_magnet_kl_is_the_exact_kl_between_move_distributions(tok):
    """After one update the policy has left the magnet (the initial policy, magnet_every 0); the next
    step's magnet_kl metric is KL(pi || magnet) over {Pass, Bet}, computed by hand from the two
    models' move probabilities, averaged over the completion tokens (the end-of-turn token is the
    only allowed one there: KL 0)."""
    seqs = kuhn_seqs(tok)
    learner = Learner(
        tiny_llama(0)[0],
        tok,
        LearnerConfig(lr=3e-3, precision="float32", loss=LossConfig(magnet_coef=0.5)),
    )
    first = learner.step(seqs)
    assert first["magnet_kl"] == pytest.approx(0.0, abs=1e-7)  # the magnet is the policy
    p = move_probs(learner, seqs, learner.policy)
    m = move_probs(learner, seqs, learner.magnet)
    assert sum(p) == pytest.approx(1.0, abs=1e-5) and sum(m) == pytest.approx(1.0, abs=1e-5)
    assert abs(p[0] - m[0]) > 1e-3  # the update moved the policy
    by_hand = sum(pi * math.log(pi / mi) for pi, mi in zip(p, m))
    second = learner.step(seqs)
    assert second["magnet_kl"] == pytest.approx(by_hand / 2, rel=1e-3)  # 2 tokens per turn


def test_magnet_pulls_the_policy_back_without_advantages(tok):
    """Zero advantages and only the magnet term: the policy, moved away by an update, returns
    towards the magnet (the KL falls step by step)."""
    seqs = kuhn_seqs(tok)
    learner = Learner(
        tiny_llama(0)[0],
        tok,
        LearnerConfig(lr=3e-3, precision="float32", loss=LossConfig(magnet_coef=1.0)),
    )
    learner.step(seqs)  # advantages +1 / -1: towards Pass
    still = kuhn_seqs(tok, advantages=(0.0, 0.0))
    kls = [learner.step(still)["magnet_kl"] for _ in range(4)]
    assert kls[0] > 0 and kls[-1] < kls[0]


def test_magnet_refreshes_every_magnet_every_steps(tok):
    """magnet_every 2: after step 1 the magnet still holds the initial weights, after step 2 the
    policy's, after step 3 again differs from the policy."""
    seqs = kuhn_seqs(tok)
    model = tiny_llama(0)[0]
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    learner = Learner(
        model,
        tok,
        LearnerConfig(
            lr=3e-3, precision="float32", magnet_every=2, loss=LossConfig(magnet_coef=0.1)
        ),
    )

    def same(a: dict, b: dict) -> bool:
        return all(torch.equal(a[k], b[k]) for k in a)

    learner.step(seqs)
    assert same(learner.magnet.state_dict(), initial)
    assert not same(learner.magnet.state_dict(), learner.policy.state_dict())
    learner.step(seqs)
    assert same(learner.magnet.state_dict(), learner.policy.state_dict())
    learner.step(seqs)
    assert not same(learner.magnet.state_dict(), learner.policy.state_dict())


def test_magnet_coef_decays_linearly():
    cfg = LossConfig(magnet_coef=0.4, magnet_decay_steps=4, magnet_coef_final=0.2)
    assert [magnet_coef_at(s, cfg) for s in (0, 2, 4, 9)] == pytest.approx([0.4, 0.3, 0.2, 0.2])
    assert magnet_coef_at(7, LossConfig(magnet_coef=0.3)) == 0.3
    with pytest.raises(ValueError, match="magnet_coef"):
        LossConfig(magnet_coef=-1.0)
    with pytest.raises(ValueError, match="magnet_every"):
        LearnerConfig(magnet_every=-1)


def test_checkpoint_restores_the_magnet(tok, tmp_path):
    """A checkpoint holds the magnet as it was (not the policy): a fresh learner that loads it
    has the same magnet; a learner with a magnet refuses a checkpoint without one."""
    seqs = kuhn_seqs(tok)
    cfg = LearnerConfig(
        lr=3e-3, precision="float32", magnet_every=3, loss=LossConfig(magnet_coef=0.1)
    )
    learner = Learner(tiny_llama(0)[0], tok, cfg)
    learner.step(seqs)
    learner.step(seqs)  # the magnet is still the initial policy
    checkpoint.save(tmp_path / "ck", learner, 2)
    other = Learner(tiny_llama(1)[0], tok, cfg)
    checkpoint.load(tmp_path / "ck", other)
    for k, v in learner.magnet.state_dict().items():
        assert torch.equal(other.magnet.state_dict()[k], v)
    plain = Learner(tiny_llama(0)[0], tok, LearnerConfig(lr=3e-3, precision="float32"))
    checkpoint.save(tmp_path / "plain", plain, 0)
    with pytest.raises(ValueError, match="no magnet"):
        checkpoint.load(tmp_path / "plain", Learner(tiny_llama(0)[0], tok, cfg))


def test_exploitability_at_every_eval_point_is_what_arena_eval_scores(tmp_path):
    """eval.exploitability: each evaluation point writes the policy's exact exploitability on Kuhn
    poker to eval.jsonl; the last one equals `evaluation.exploitability` of the saved final
    checkpoint played as `llm:RUN` (at its training temperature), within [0, 0.5] (a constrained
    near-uniform policy: random's 0.4583 is the reference point)."""
    run = tmp_path / "kuhn"
    cfg = parse_config(
        {
            "model": "tiny-llama:hidden=32:heads=2:layers=1",
            "seed": 1,
            "steps": 2,
            "run_dir": str(run),
            "games": ["kuhn_poker"],
            "matches_per_step": 8,
            "concurrency": 8,
            "agent": {"prompt": "state", "constrained": True, "temperature": 1.0},
            "advantage": {"estimator": "gigpo", "format_reward": 0.0},
            "learner": {"lr": 1e-3, "loss": {"magnet_coef": 0.5}, "magnet_every": 1},
            "league": {"self_play": 1.0},
            "eval": {
                "every": 1,
                "games": 0,
                "opponents": [],
                "keep_best": False,
                "exploitability": True,
            },
            "checkpoint_every": 2,
        }
    )
    train(cfg)
    rows = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    gaps = [r for r in rows if r.get("kind") == "exploitability"]
    assert [r["step"] for r in gaps] == [0, 1, 2]
    assert all(0.0 <= r["exploitability"] <= 0.5 and r["states"] == 12 for r in gaps)
    assert all(r["exploitability"] == pytest.approx(r["nash_conv"] / 2) for r in gaps)
    scored = exploitability(make_agent(f"llm:{run}"), "kuhn_poker")
    assert scored.exploitability == pytest.approx(gaps[-1]["exploitability"], abs=1e-5)
    assert (run / "eval.png").is_file()


@pytest.mark.parametrize(
    "extra,message",
    [
        (
            {"games": ["prisoners_dilemma"], "eval": {"exploitability": True}},
            "eval.exploitability needs OpenSpiel games",
        ),
        (
            {
                "games": ["kuhn_poker"],
                "agent": {"constrained": False},
                "learner": {"loss": {"magnet_coef": 0.5}},
            },
            "magnet_coef needs agent.constrained",
        ),
    ],
)
def test_configs_the_method_cannot_serve_are_refused(tmp_path, extra, message):
    with pytest.raises(ValueError, match=message):
        parse_config({"model": "tiny-llama", "steps": 1, "run_dir": str(tmp_path / "r"), **extra})


def test_kuhn_state_text_tells_every_information_state_apart():
    """`prompt: state` shows the state text alone: the 12 information states of Kuhn poker must
    read differently (player_0 facing a bet after its pass vs player_1 facing an opening bet)."""
    game = pyspiel.load_game("kuhn_poker")
    texts: dict[str, str] = {}
    stack = [game.new_initial_state()]
    while stack:
        state = stack.pop()
        if state.is_terminal():
            continue
        if not state.is_chance_node():
            env = games.make("kuhn_poker")
            env.reset(seed=0, options={"history": state.history()})
            texts[state.information_state_string()] = env.state_text(env.agent_selection)
        stack.extend(state.child(a) for a in state.legal_actions())
    assert len(texts) == 12 and len(set(texts.values())) == 12
