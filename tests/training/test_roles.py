"""Per-role policies: one LoRA adapter per role on a shared base, each trained on its own
role's turns only (`training.roles`, `Learner(roles=...)`), on the real tiny Llama."""

import pytest
import torch

from agents.models import tiny_llama
from training.learner import Learner
from training.learner_config import LearnerConfig
from training.loss import LossConfig
from training.sequences import TrainingSequence

ROLES = ("first", "second")


@pytest.fixture(scope="module")
def tok():
    return tiny_llama(0)[1]


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def config(**over) -> LearnerConfig:
    return LearnerConfig(
        **{"lr": 1e-2, "lora_rank": 4, "precision": "float32", "weight_decay": 0.1} | over
    )


def role_learner(roles=ROLES, **over) -> Learner:
    torch.manual_seed(0)
    model, tok = tiny_llama(0)
    return Learner(model, tok, config(**over), roles=roles)


def turns(tok, role: str) -> list[TrainingSequence]:
    """Two turns of `role`, with advantages of both signs."""
    return [
        TrainingSequence(
            ids(tok, f"{role}: the board"), ids(tok, " 4") + [tok.eos_token_id], 1.0, role=role
        ),
        TrainingSequence(ids(tok, f"{role}: your move"), ids(tok, " 7 wins"), -0.5, role=role),
    ]


def adapter(learner: Learner, role: str) -> dict[str, torch.Tensor]:
    """The weights of `role`'s adapter, under names without the role."""
    return {
        n.replace(f".{role}.", "."): p.detach().clone()
        for n, p in learner.model.named_parameters()
        if "lora_" in n and f".{role}." in n
    }


def test_an_adapter_gets_gradient_only_from_its_roles_turns(tok):
    learner = role_learner()
    learner.step(turns(tok, "second"))  # the gradients stay on the weights after the step
    first, second = learner.role_parameters("first"), learner.role_parameters("second")
    assert first and second
    assert all(p.grad is None or not p.grad.any() for p in first)
    assert any(p.grad is not None and p.grad.any() for p in second)
    learner.step(turns(tok, "first") + turns(tok, "second"))
    assert any(p.grad is not None and p.grad.any() for p in first)


def test_a_step_leaves_the_adapter_of_a_role_without_turns_bitwise_unchanged(tok):
    learner = role_learner()
    learner.step(turns(tok, "first") + turns(tok, "second"))  # both have AdamW state now
    before = {r: adapter(learner, r) for r in ROLES}
    learner.step(turns(tok, "second"))
    after = {r: adapter(learner, r) for r in ROLES}
    assert all(torch.equal(before["first"][k], after["first"][k]) for k in before["first"])
    assert any(not torch.equal(before["second"][k], after["second"][k]) for k in before["second"])


def test_a_role_trains_as_its_own_single_adapter_learner_would(tok):
    """The mixed batch's step moves role `first`'s adapter exactly as a one-policy learner,
    started from the same adapter, moves its own on `first`'s turns alone (the other role's
    turns change neither its loss normalisation nor its gradient clipping)."""
    mixed = role_learner(max_grad_norm=0.05)
    torch.manual_seed(0)
    model, _ = tiny_llama(0)
    alone = Learner(model, tok, config(max_grad_norm=0.05))
    start = adapter(mixed, "first")
    with torch.no_grad():
        for n, p in alone.model.named_parameters():
            if "lora_" in n:
                p.copy_(start[n.replace(".default.", ".")])
    mine = turns(tok, "first")
    mixed.step(mine + turns(tok, "second") * 3)
    alone.step([TrainingSequence(s.prompt_ids, s.completion_ids, s.advantage) for s in mine])
    got = adapter(mixed, "first")
    want = adapter(alone, "default")
    assert any(not torch.equal(start[k], got[k]) for k in start)
    for k in got:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_a_kl_to_the_base_model_leaves_every_roles_adapter_trainable(tok, precision):
    """The KL's reference is the base model with the adapters off (peft's `disable_adapter`,
    which freezes every adapter but the active one as it turns them back on): each role's
    adapter still trains, step after step, with fp32 weights and with a bf16 copy."""
    learner = role_learner(precision=precision, loss=LossConfig(kl_coef=0.1))
    for _ in range(2):
        before = {r: adapter(learner, r) for r in ROLES}
        learner.step(turns(tok, "first") + turns(tok, "second"))
        for role in ROLES:
            after = adapter(learner, role)
            assert any(not torch.equal(before[role][k], after[k]) for k in after), role
    for model in (learner.model, learner.policy):
        assert all(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)


def test_logprobs_are_each_roles_own(tok):
    learner = role_learner()
    seqs = turns(tok, "first") + turns(tok, "second")
    learner.step(seqs)  # the adapters now differ
    both = learner.logprobs(seqs)
    for role in ROLES:
        alone = learner.logprobs([s for s in seqs if s.role == role])
        assert alone == [lp for s, lp in zip(seqs, both) if s.role == role]
    assert learner.logprobs(turns(tok, "first")) != learner.logprobs(
        [
            TrainingSequence(s.prompt_ids, s.completion_ids, s.advantage, role="second")
            for s in turns(tok, "first")
        ]
    )


def test_roles_need_lora_and_known_roles(tok):
    model, _ = tiny_llama(0)
    with pytest.raises(ValueError, match="learner.lora_rank must be > 0 with roles"):
        Learner(model, tok, LearnerConfig(precision="float32"), roles=ROLES)
    learner = role_learner()
    with pytest.raises(ValueError, match="role third: this learner trains first, second"):
        learner.step(turns(tok, "third"))


# --- rollouts: each seat plays with its role's adapter ----------------------------------------

SEATS = {"player_0": "first", "player_1": "second"}


def test_the_backend_plays_each_seat_with_its_roles_adapter(tok):
    from agents.models import use_adapter
    from agents.transformers_backend import TransformersBackend

    learner = role_learner()
    with torch.no_grad():  # the two adapters made different (lora_B starts at zero)
        for n, p in learner.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5 if ".first." in n else 0.1)
    conv = [{"role": "user", "content": "Your move: a, b or c?"}]
    moves = [["a", "b", "c"]]
    backend = TransformersBackend((learner.policy, tok), seat_adapters=SEATS)
    got = backend.move_distributions(
        [conv, conv, conv], moves * 3, 1.0, ["player_1", "player_0", "player_1"]
    )
    plain = TransformersBackend((learner.policy, tok))
    want = {}
    for role in ROLES:  # the independent path: one adapter made active by hand
        use_adapter(learner.policy, role)
        want[role] = plain.move_distributions([conv], moves, 1.0)[0]
    assert want["first"] != pytest.approx(want["second"], abs=1e-3)
    for g, role in zip(got, ("second", "first", "second")):  # a batch of two rounds apart
        assert g == pytest.approx(want[role], abs=1e-6)
    with pytest.raises(ValueError, match="pass players"):
        backend.move_distributions([conv], moves, 1.0)
    with pytest.raises(ValueError, match="no adapter for seat player_2"):
        backend.move_distributions([conv], moves, 1.0, ["player_2"])


# --- the training loop --------------------------------------------------------------------------

ROLE_RUN = {
    "roles": {"first": ["player_0"], "second": ["player_1"]},
    "learner": {"lr": 3e-3, "lora_rank": 4, "precision": "float32"},
    "league": {"self_play": 0.5, "bots": ["random"], "snapshot_every": 0},
    "steps": 2,
    "checkpoint_every": 1,
    "eval": {"every": 0},
}


def lora_b(path, role):
    from safetensors.torch import load_file

    weights = load_file(str(path / "model.safetensors"))
    return [v for k, v in weights.items() if "lora_B" in k and f".{role}." in k]


def test_two_roles_train_on_a_two_player_game_and_resume_exactly(tiny_run, tmp_path):
    from safetensors.torch import load_file

    from agents.models import load_model
    from tests.tiny_run import quiet
    from training.selfplay import train

    train(tiny_run("straight", **ROLE_RUN), console=quiet())
    done = tmp_path / "straight" / "checkpoints" / "step_00000002"
    for role in ROLES:  # both adapters learned (lora_B starts at zero)
        assert lora_b(done, role) and any(b.any() for b in lora_b(done, role))
    train(tiny_run("split", **{**ROLE_RUN, "steps": 1}), console=quiet())
    train(tiny_run("split", **ROLE_RUN), resume=True, console=quiet())
    a = load_file(str(done / "model.safetensors"))
    b = load_file(str(tmp_path / "split" / "checkpoints" / "step_00000002" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    first, _ = load_model(f"{done}#first", dtype="float32", device="cpu")
    second, _ = load_model(f"{done}#second", dtype="float32", device="cpu")
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(first.state_dict()[q], second.state_dict()[q])
    with pytest.raises(ValueError, match=r"one policy per role \(first, second\): name one"):
        load_model(str(done), dtype="float32", device="cpu")


def test_roles_on_a_four_player_game(tiny_run, tmp_path):
    from tests.tiny_run import quiet
    from training.selfplay import train

    cfg = tiny_run(
        games=["public_goods"],
        roles={"even": ["player_0", "player_2"], "odd": ["player_1", "player_3"]},
        learner={"lr": 3e-3, "lora_rank": 4},
        league={"self_play": 1.0, "bots": [], "snapshot_every": 0},
        steps=1,
        matches_per_step=2,
        eval={"every": 0},
    )
    train(cfg, console=quiet())
    done = tmp_path / "run" / "checkpoints" / "step_00000001"
    for role in ("even", "odd"):
        assert any(b.any() for b in lora_b(done, role))


@pytest.mark.parametrize(
    "over, error",
    [
        ({"learner": {"lora_rank": 0}}, "roles needs learner.lora_rank > 0"),
        ({"roles": {"first": ["player_0"]}}, "roles: seat player_1 of tic_tac_toe has no role"),
        (
            {"roles": {"a": ["player_0"], "b": ["player_0", "player_1"]}},
            "seat player_0 is already role a's",
        ),
        ({"roles": {"1st": ["player_0"]}}, "a role name must be a letter"),
        ({"league": {"snapshot_every": 1}}, "roles needs no league.snapshot_every"),
    ],
)
def test_bad_roles_are_one_line_errors(tiny_run, over, error):
    with pytest.raises(ValueError, match=error):
        tiny_run(
            **{**ROLE_RUN, **over, "learner": {**ROLE_RUN["learner"], **over.get("learner", {})}}
        )


def test_mars_normalises_per_role_when_a_role_holds_several_seats():
    """Agent-specific normalisation by role: the return-to-go baseline is the mean over the
    role's turns (its seats together), computed here by hand for one turn per seat."""
    from tests.training.test_advantages import match
    from training.advantages import AdvantageConfig, mars

    m = match(
        [("player_0", 1.0, 2), ("player_1", 2.0, 2), ("player_2", 3.0, 2), ("player_3", 6.0, 2)]
    )
    cfg = AdvantageConfig(
        format_reward=0.0, player_reward_norm=False, whiten_rewards=False, whiten_advantages=False
    )
    roles = {"player_0": "even", "player_2": "even", "player_1": "odd", "player_3": "odd"}
    by_role = {s.player: s.advantage for s in mars([m], cfg, {}, norm_groups=roles)}
    # even: G 1 and 3, baseline 2; odd: G 2 and 6, baseline 4
    assert by_role == {"player_0": -1.0, "player_1": -2.0, "player_2": 1.0, "player_3": 2.0}
    by_seat = {s.player: s.advantage for s in mars([m], cfg, {})}
    assert by_seat == dict.fromkeys(roles, 0.0)  # each seat its own baseline


# --- roles a game deals each match (werewolf) ---------------------------------------------------

DEALT = {"wolves": ["werewolf"], "village": ["seer", "doctor", "villager"]}


def test_mars_normalises_per_dealt_role_not_per_seat():
    """In a game that deals roles, a seat is a wolf in one match and a villager in the next:
    the baselines are the roles' (by hand: one turn per seat and match)."""
    from tests.training.test_advantages import match
    from training.advantages import AdvantageConfig, mars

    m1 = match([("player_0", 1.0, 2), ("player_1", 2.0, 2)], mid="m1")
    m2 = match([("player_0", 5.0, 2), ("player_1", 3.0, 2)], mid="m2")
    m1.roles = {"player_0": "werewolf", "player_1": "villager"}
    m2.roles = {"player_0": "villager", "player_1": "werewolf"}
    cfg = AdvantageConfig(
        format_reward=0.0, player_reward_norm=False, whiten_rewards=False, whiten_advantages=False
    )
    got = {(s.match_index, s.player): s.advantage for s in mars([m1, m2], cfg, {})}
    # werewolf: G 1 (m1) and 3 (m2), baseline 2; villager: G 2 (m1) and 5 (m2), baseline 3.5
    assert got == {
        (0, "player_0"): -1.0,
        (0, "player_1"): -1.5,
        (1, "player_0"): 1.5,
        (1, "player_1"): 1.0,
    }
    roles = {s.role for s in mars([m1, m2], cfg, {})}
    assert roles == {"werewolf", "villager"}


def test_a_sequence_trains_the_adapter_of_the_role_its_seat_was_dealt():
    from tests.training.test_advantages import match
    from training.advantages import AdvantageConfig, mars
    from training.config import seat_roles
    from training.sequences import sequences_from_samples

    m = match([("player_0", 1.0, 2), ("player_1", 0.0, 2), ("player_2", 1.0, 2)])
    m.roles = {"player_0": "seer", "player_1": "werewolf", "player_2": "villager"}
    for t in m.turns:
        t.prompt_token_ids = [1, 2, 3]
    samples = mars([m], AdvantageConfig(format_reward=0.0), {})
    seqs = sequences_from_samples(samples, None, roles=seat_roles(DEALT))
    assert [s.role for s in seqs] == ["village", "wolves", "village"]


def test_roles_that_leave_a_dealt_role_out_are_a_one_line_error(tiny_run):
    with pytest.raises(ValueError, match="roles: game role doctor of werewolf has no role"):
        tiny_run(
            games=[{"name": "werewolf", "params": {"num_players": 5}}],
            roles={"wolves": ["werewolf"], "village": ["seer", "villager"]},
            learner={"lr": 3e-3, "lora_rank": 4},
            league={"self_play": 1.0, "bots": [], "snapshot_every": 0},
            eval={"every": 0},
        )


def test_werewolf_trains_one_adapter_per_dealt_role(tiny_run, tmp_path):
    """The backend has adapters only for the roles (no seat names): a match in which the agent
    asked for a seat's adapter would fail; both adapters learn from their roles' turns."""
    from tests.tiny_run import quiet
    from training.selfplay import train

    cfg = tiny_run(
        games=[{"name": "werewolf", "params": {"num_players": 5, "max_days": 2}}],
        roles=DEALT,
        agent={"max_new_tokens": 6},
        learner={"lr": 3e-3, "lora_rank": 4},
        league={"self_play": 1.0, "bots": [], "snapshot_every": 0},
        steps=1,
        matches_per_step=2,
        eval={"every": 0},
    )
    train(cfg, console=quiet())
    done = tmp_path / "run" / "checkpoints" / "step_00000001"
    for role in DEALT:
        assert any(b.any() for b in lora_b(done, role))
