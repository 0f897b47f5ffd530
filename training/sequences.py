"""Training examples and how the learner cuts them into micro-batches.

A training example is a `TrainingSequence`: prompt token ids, completion token ids, one
advantage, the behaviour log-probabilities (or None) and, for a turn decoded under legal-move
constraints, the allowed strings (`sequences_from_samples` makes them from a step's turns).
`micro_batches` cuts a step's sequences into `MicroBatch`es:

- with `shared_prefix` (the default on a CPU): sort the sequences by their tokens and cut them
  into micro-batches of at most `SHARED_BUDGET_SHARE` of `micro_batch_tokens` distinct tokens,
  laid out on the step's prefix tree (`training.prefix_tree`): every token several sequences
  share (a game's rules, a conversation's earlier turns) is computed once, forward and
  backward, each continuation attending to its keys and values; segments several
  micro-batches share (the `SharedTrunk`) are computed once per pass and their gradients
  carried back at the end of the step. The hidden states of the positions that predict
  completion tokens are gathered and the LM head runs on those only;
- without it (or on a model the tree does not fit: `shares_prefix`): sort by length and pack
  into micro-batches of at most `micro_batch_tokens` padded tokens; each row is laid out
  `[pad.. prompt | completion ..pad]` so every completion starts at the same column, positions
  count real tokens only (as a left-padded rollout does), and the LM head runs on completion
  positions only (`logits_to_keep`).

Both give the same log-probabilities and gradients up to the summation order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from agents.constrained import allowed_token_ids
from agents.transformers_backend import CPU_SDPA  # prefill goes to sdpa: it takes the tree's masks
from training.precision import BF16_ATTENTION
from training.prefix_tree import TreeOutput, TreePlan, build_tree


@dataclass
class TrainingSequence:
    """One training example: a completion after a prompt, with its advantage."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    logprobs: list[float] | None = None
    """behaviour log-probabilities of completion_ids; None: use the current policy's"""
    allowed: list[str] | None = None
    """the legal moves when decoding was constrained to them"""
    value_target: float | None = None
    """what the value head should predict for the prompt (critic); None: no value loss"""
    role: str | None = None
    """the role whose LoRA adapter plays and learns this turn (per-role policies); None: the one policy"""


def sequences_from_samples(
    samples, tokenizer=None, recompute: str = "constrained", roles: Mapping[str, str] | None = None
) -> list[TrainingSequence]:
    """`TrainingSequence`s from `training.advantages.TurnSample`s.

    `recompute` says whose recorded behaviour logprobs to drop (then the current policy's
    are used): "missing" (only turns without them), "constrained" (also constrained
    turns: a backend may record the unmasked distribution, which would skew the ratio),
    or "all". A turn without `prompt_token_ids` is re-rendered from its `messages` with
    the tokenizer's chat template. Turns without completion tokens are skipped. `roles` maps
    a seat (the sample's player), or a role the game dealt it (the sample's `role`), to the
    role the sequence trains (per-role policies).
    """
    if recompute not in ("missing", "constrained", "all"):
        raise ValueError(f"recompute must be 'missing', 'constrained' or 'all', got {recompute!r}")
    out = []
    for s in samples:
        t = s.turn
        if not t.token_ids:
            continue
        prompt = list(t.prompt_token_ids)
        if not prompt:
            if not t.messages or tokenizer is None:
                raise ValueError(
                    f"turn {s.turn_index} of match {s.match_index} has no prompt_token_ids and no messages to render"
                )
            prompt = render_prompt(tokenizer, t.messages)
        logprobs = list(t.logprobs) if t.logprobs else None
        if logprobs is not None and len(logprobs) != len(t.token_ids):
            raise ValueError(
                f"turn {s.turn_index} of match {s.match_index}: {len(logprobs)} logprobs for {len(t.token_ids)} tokens"
            )
        if recompute == "all" or (recompute == "constrained" and t.constrained):
            logprobs = None
        out.append(
            TrainingSequence(
                prompt,
                list(t.token_ids),
                float(s.advantage),
                logprobs,
                list(t.legal_moves) if t.constrained else None,
                getattr(s, "value_target", None),
                roles.get(getattr(s, "role", ""), roles.get(s.player)) if roles else None,
            )
        )
    return out


def render_prompt(tokenizer, messages) -> list[int]:
    """The token ids of a chat prompt as the policy sees it (the chat template, generation prompt added).

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        messages: the chat messages ({"role", "content"} dicts).

    Returns:
        The prompt's token ids.
    """
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    return list(ids)


@dataclass
class MicroBatch:
    """One padded micro-batch: a row per sequence (`input_ids` ...), or a prefix tree (`plan`)."""

    input_ids: torch.Tensor | None  # (B, P + C - 1)
    attention_mask: torch.Tensor | None  # (B, P + C - 1)
    position_ids: torch.Tensor | None  # (B, P + C - 1)
    targets: torch.Tensor  # (B, C) completion tokens (pad beyond each length)
    mask: torch.Tensor  # (B, C) 1 on completion tokens
    advantages: torch.Tensor  # (B,)
    value_targets: torch.Tensor  # (B,) (0 where missing)
    has_value: torch.Tensor  # (B,) bool: a value target is given
    old_logp: torch.Tensor  # (B, C) behaviour logprobs (0 where missing)
    has_old: torch.Tensor  # (B,) bool: behaviour logprobs recorded
    constrained: list[tuple[int, int, list[int]]]  # (row, position, allowed ids)
    index: list[int]  # rows -> positions in the caller's list
    plan: TreePlan | None = None  # the shared-prefix layout (then input_ids etc. are None)
    hidden_index: torch.Tensor | None = None  # (B, C) where each scored position is in the plan
    trunk: SharedTrunk | None = (
        None  # the segments this micro-batch shares with others (plan.outer)
    )


@dataclass
class SharedTrunk:
    """The prefix-tree segments several micro-batches of a step share: computed once per pass
    (`training.logprobs.shared_trunk`), each micro-batch attending to `state`."""

    plan: TreePlan
    state: TreeOutput | None = None  # during a pass: its output (leaves of the pass's graph)


def plain_lm_head(model) -> bool:
    """The logits are exactly `get_output_embeddings()(last hidden state)`: a Linear head,
    no soft-capping or logit scale (then `training.logprobs` may slice the head)."""
    try:
        head = model.get_output_embeddings()
        model.get_decoder()
    except (AttributeError, NotImplementedError):
        return False
    cfg = getattr(model, "config", None)
    return (
        isinstance(head, torch.nn.Linear)
        and getattr(cfg, "final_logit_softcapping", None) is None
        and getattr(cfg, "logit_scale", None) is None
        and getattr(cfg, "logits_scaling", None) is None
    )


SHARED_ATTENTION = (
    "sdpa",
    CPU_SDPA,
    "eager",
    BF16_ATTENTION,
)  # take the 4D masks of `training.prefix_tree`
SHARED_MIN_TOKENS = 32  # share a prefix-tree segment when that saves this many token passes
SHARED_BUCKET_COST = 32  # one more padded pass over a tree depth, counted in token passes
# A prefix tree's micro-batch computes at most this share of `micro_batch_tokens` (trunk
# included): its rows are whole segments with no padding, each attending to its whole past;
# at half it holds no more than the padded micro-batches of the same sequences, no slower
# (docs/results/benchmarks.md, "Shared-prefix learner").
SHARED_BUDGET_SHARE = 0.5


def shares_prefix(model, attention: str | None) -> bool:
    """`model` can run a prefix tree (`training.prefix_tree`): a plain LM head, an attention that
    takes a custom 4D mask, and no sliding-window layers (the tree's past is not windowed)."""
    config = getattr(model, "config", None)
    if config is None or not plain_lm_head(model):
        return False
    layer_types = getattr(config, "layer_types", None) or []
    sliding = any(t != "full_attention" for t in layer_types) or (
        getattr(config, "sliding_window", None) is not None
        and getattr(config, "use_sliding_window", True)
    )
    return not sliding and (attention or config._attn_implementation) in SHARED_ATTENTION


def mask_kind(model) -> str:
    """The 4D mask `model`'s attention takes in a prefix tree: boolean for sdpa, else additive."""
    return "bool" if model.config._attn_implementation in ("sdpa", CPU_SDPA) else "additive"


def _token_groups(
    order: list[int], fed: list[list[int]], budget: int, trunk: dict[int, int] | None = None
) -> list[list[int]]:
    """`order` (sequences sorted by their tokens) cut into runs that compute at most `budget`
    tokens each: a sequence adds its tokens past the prefix it shares with the one before in
    its run, or past its part in the `trunk` (sequence -> its tokens there, computed once for
    every run). A run is cut where the least would be computed twice (between two games
    rather than inside one conversation), once it holds half the budget. A run may hold as
    many tokens as its longest sequence (a conversation longer than the budget, whose last
    turn a pass without sharing would hold in one row too)."""
    trunk = trunk or {}
    n = len(order)
    lcp = [0] + [_common_prefix(fed[order[k - 1]], fed[order[k]]) for k in range(1, n)]

    def cost(k: int, first: bool) -> int:
        i = order[k]
        return len(fed[i]) - (trunk.get(i, 0) if first else max(lcp[k], trunk.get(i, 0)))

    def twice(j: int) -> int:  # computed in both runs when one ends before j
        return max(0, lcp[j] - trunk.get(order[j], 0))

    groups, start, total, k = [], 0, 0, 0
    while k < n:
        c = cost(k, k == start)
        if k > start and total + c > max(budget, cost(k, True)):
            cuts, filled = [k], 0
            for j in range(start + 1, k):  # cut before j: [start, j) is a run
                filled += cost(j - 1, j - 1 == start)
                if filled >= budget // 2:
                    cuts.append(j)
            best = min(cuts, key=lambda j: (twice(j), -j))
            groups.append(order[start:best])
            start = k = best
            total = 0
            continue
        total += c
        k += 1
    if start < n:
        groups.append(order[start:])
    return groups


def _shared_segments(tree, groups: list[list[int]]) -> list[int]:
    """The segments of `tree` on the paths of more than one group, parents first."""
    users: dict[int, set[int]] = {}
    for g, seqs in enumerate(groups):
        for i in seqs:
            for k in tree.path(i):
                users.setdefault(k, set()).add(g)
    return sorted(k for k, gs in users.items() if len(gs) > 1)


def _common_prefix(a: list[int], b: list[int]) -> int:
    """The number of leading tokens `a` and `b` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class Batching:
    """What cutting sequences into micro-batches needs to know."""

    tokenizer: Any
    """decodes a bad constrained completion for the error, and finds each position's allowed ids"""
    pad_id: int
    """the token padded rows are filled with"""
    device: torch.device
    """where the micro-batches' tensors go"""
    micro_batch_tokens: int
    """padded tokens per micro-batch (`LearnerConfig.micro_batch_tokens`)"""
    shared_prefix: bool
    """lay micro-batches out on the step's prefix tree"""


def micro_batches(seqs: list[TrainingSequence], batching: Batching) -> list[MicroBatch]:
    """`seqs` (each with completion tokens) cut into micro-batches: prefix trees when
    `batching.shared_prefix`, else padded rows, longest first."""
    if batching.shared_prefix:
        return _tree_batches(seqs, batching)
    order = sorted(
        range(len(seqs)),
        key=lambda i: (len(seqs[i].prompt_ids) + len(seqs[i].completion_ids), i),
        reverse=True,
    )
    groups, cur, P, C = [], [], 0, 0
    for i in order:
        p, c = len(seqs[i].prompt_ids), len(seqs[i].completion_ids)
        nP, nC = max(P, p), max(C, c)
        if cur and (len(cur) + 1) * (nP + nC) > batching.micro_batch_tokens:
            groups.append(cur)
            cur, nP, nC = [], p, c
        cur.append(i)
        P, C = nP, nC
    if cur:
        groups.append(cur)
    return [_pad([seqs[i] for i in g], g, batching) for g in groups]


def _tree_batches(seqs: list[TrainingSequence], batching: Batching) -> list[MicroBatch]:
    """Micro-batches of sequences in token order (so those sharing a prefix are together),
    laid out on the step's prefix tree: the segments several micro-batches share (the
    trunk: a game's rules, a conversation's opening) are computed once per pass, and each
    micro-batch computes its own at most `SHARED_BUDGET_SHARE` of `micro_batch_tokens`
    distinct tokens, trunk included, so that a pass holds no more activations than one
    padded row per sequence would."""
    fed = [s.prompt_ids + s.completion_ids[:-1] for s in seqs]  # the last token predicts nothing
    order = sorted(range(len(seqs)), key=lambda i: (fed[i], i))
    tree = build_tree(fed, SHARED_MIN_TOKENS)
    budget = max(1, int(batching.micro_batch_tokens * SHARED_BUDGET_SHARE))
    groups = _token_groups(order, fed, budget, None)
    trunk = _trunk_segments(tree, groups, budget)
    if trunk:  # regroup in the room the trunk leaves
        in_trunk = set(trunk)
        part = {
            i: sum(len(tree.segments[k].tokens) for k in tree.path(i) if k in in_trunk)
            for i in order
        }
        room = budget - sum(len(tree.segments[k].tokens) for k in trunk)
        groups = _token_groups(order, fed, room, part)
    dev = batching.device
    outer = None
    if trunk:
        plan = TreePlan(tree, batching.pad_id, dev, SHARED_BUCKET_COST, segments=trunk)
        outer = SharedTrunk(plan)
    in_trunk = set(trunk)
    out = []
    for g in groups:
        used = sorted({k for i in g for k in tree.path(i)} - in_trunk)
        plan = TreePlan(
            tree,
            batching.pad_id,
            dev,
            SHARED_BUCKET_COST,
            segments=used,
            outer=outer.plan if outer is not None else None,
        )
        out.append(_pad([seqs[i] for i in g], g, batching, plan, outer))
    return out


def _trunk_segments(tree, groups: list[list[int]], budget: int) -> list[int]:
    """The segments several of `groups` share that are computed once per pass: parents first,
    each with its parent, at most half the `budget` in all."""
    trunk: list[int] = []
    for k in _shared_segments(tree, groups):
        parent = tree.segments[k].parent
        size = len(tree.segments[k].tokens)
        if (parent < 0 or parent in trunk) and sum(
            len(tree.segments[t].tokens) for t in trunk
        ) + size <= budget // 2:
            trunk.append(k)
    return trunk


def _constrained_positions(
    rows: list[TrainingSequence], tokenizer
) -> list[tuple[int, int, list[int]]]:
    """(row, position, allowed token ids) of every completion token of the constrained `rows`.

    Raises:
        ValueError: a constrained completion leaves its legal moves.
    """
    constrained = []
    for b, s in enumerate(rows):
        if s.allowed is None:
            continue
        for j in range(len(s.completion_ids)):
            allowed = allowed_token_ids(tokenizer, s.allowed, s.completion_ids[:j])
            if s.completion_ids[j] not in allowed:
                raise ValueError(
                    f"constrained completion {tokenizer.decode(s.completion_ids)!r} leaves the legal moves at token {j}; "
                    "was it decoded with agents.constrained.allowed_token_ids?"
                )
            constrained.append((b, j, allowed))
    return constrained


def _hidden_index(
    rows: list[TrainingSequence], index: list[int], plan: TreePlan, C: int
) -> torch.Tensor:
    """(B, C) where in `plan` each position that predicts a completion token of `rows` is."""
    hidden_index = torch.zeros((len(rows), C), dtype=torch.long)
    for b, (s, i) in enumerate(zip(rows, index)):
        p = len(s.prompt_ids)
        for j in range(len(s.completion_ids)):  # position p - 1 + j predicts token j
            hidden_index[b, j] = plan.index(i, p - 1 + j)
    return hidden_index


def _pad(
    rows: list[TrainingSequence],
    index: list[int],
    batching: Batching,
    plan: TreePlan | None = None,
    trunk: SharedTrunk | None = None,
) -> MicroBatch:
    """The micro-batch of `rows` (`index`: their places in the caller's list): padded rows,
    or the `plan` of a prefix tree over the caller's list (`trunk`: its outer plan's)."""
    P = max(len(s.prompt_ids) for s in rows)
    C = max(len(s.completion_ids) for s in rows)
    B = len(rows)
    ids = torch.full((B, P + C), batching.pad_id, dtype=torch.long)
    attn = torch.zeros((B, P + C), dtype=torch.long)
    old = torch.zeros((B, C))
    has_old = torch.zeros(B, dtype=torch.bool)
    for b, s in enumerate(rows):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        ids[b, P - p : P] = torch.tensor(s.prompt_ids)
        ids[b, P : P + c] = torch.tensor(s.completion_ids)
        attn[b, P - p : P + c] = 1
        if s.logprobs is not None:
            old[b, :c] = torch.tensor(s.logprobs)
            has_old[b] = True
    constrained = _constrained_positions(rows, batching.tokenizer)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    mask = (
        torch.arange(C)[None, :] < torch.tensor([len(s.completion_ids) for s in rows])[:, None]
    ).float()
    dev = batching.device
    hidden_index = None if plan is None else _hidden_index(rows, index, plan, C).to(dev)
    return MicroBatch(
        input_ids=None if plan else ids[:, :-1].to(dev),  # the last token predicts nothing
        attention_mask=None if plan else attn[:, :-1].to(dev),
        position_ids=None if plan else pos[:, :-1].to(dev),
        targets=ids[:, P:].to(dev),
        mask=mask.to(dev),
        advantages=torch.tensor([s.advantage for s in rows], dtype=torch.float32).to(dev),
        value_targets=torch.tensor([s.value_target or 0.0 for s in rows], dtype=torch.float32).to(
            dev
        ),
        has_value=torch.tensor([s.value_target is not None for s in rows], dtype=torch.bool).to(
            dev
        ),
        old_logp=old.to(dev),
        has_old=has_old.to(dev),
        constrained=constrained,
        index=index,
        plan=plan,
        hidden_index=hidden_index,
        trunk=trunk,
    )
