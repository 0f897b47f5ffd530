"""Shared-prefix forward: every token of a batch of sequences computed once (Prefix Grouper).

The sequences of a training step start alike: the prompts of one game carry the same rules
and answer format, and in a growing conversation (`mode: multi_turn`) each turn's prompt is
the previous turn's prompt, reply and a new observation. A causal model's hidden state at a
position depends only on the tokens up to it, so two sequences that agree on their first n
tokens have the same keys, values and hidden states there: computing them once and letting
each continuation attend to them gives every position the same numbers (up to the summation
order of the attention) at a fraction of the FLOPs. This is Prefix Grouper's shared-prefix
forward ("Efficient GRPO Training through Shared-Prefix Forward"), generalised from one
shared prompt per group to a prefix tree.

`build_tree(inputs)` lays the sequences (token id lists) out as a radix tree of `Segment`s:
a segment's tokens are common to every sequence below it, and a segment splits only where
its sequences continue differently (a sequence that is a prefix of another, such as an
earlier turn of the same conversation, ends inside the other's segment: the whole
conversation is one segment, computed in one pass). A shared segment whose sharing saves
fewer than `min_shared` token computations is pushed down into its children (each child
computes it again): a separate pass costs more than that.

`TreePlan(tree, pad_id, device)` schedules the segments: depth by depth (a segment needs its
ancestors' keys and values), each depth in buckets of similar lengths (padding costs
computation; another pass costs a little too, `bucket_cost`). `tree_hidden(decoder, plan)`
runs the decoder (a transformers base model: `model.get_decoder()`) over the buckets in
order: a bucket's rows are its segments, right-padded, at their true positions (a segment
starts where its ancestors end), with its ancestors' keys and values gathered per layer as
the rows' past, and a 4D mask that lets each row see its own ancestors and itself causally.
Gradients flow through the gathered keys and values back to the passes that computed them;
under gradient checkpointing each layer keeps the tree's cache and recomputes with it.
It returns the final hidden states of every computed position, flattened; `plan.index(seq,
position)` says where a sequence's position is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

MASK_KINDS = ("bool", "additive")  # sdpa takes a boolean mask; eager attentions an additive one


@dataclass
class Segment:
    """A run of tokens common to every sequence below it in the tree."""

    tokens: list[int]
    start: int
    """the position of its first token (the length of its ancestors)"""
    parent: int
    """the segment whose tokens come right before (its index in the tree), -1 for a root"""


@dataclass
class PrefixTree:
    """Sequences laid out as a radix tree of segments (see the module docstring)."""

    segments: list[Segment]
    ends: list[int]
    """per sequence, the segment where it ends (its path runs from a root down to it)"""
    lengths: list[int]
    """per sequence, its number of tokens"""

    def path(self, seq: int) -> list[int]:
        """The segments of sequence `seq`, root first."""
        out, s = [], self.ends[seq]
        while s >= 0:
            out.append(s)
            s = self.segments[s].parent
        return out[::-1]

    def distinct_tokens(self) -> int:
        """Tokens the tree computes (each segment once)."""
        return sum(len(s.tokens) for s in self.segments)


def _common(a: list[int], b: list[int], start: int) -> int:
    """How many tokens `a` and `b` agree on from `start`."""
    n, k = min(len(a), len(b)), start
    while k < n and a[k] == b[k]:
        k += 1
    return k - start


def build_tree(inputs: list[list[int]], min_shared: int = 32) -> PrefixTree:
    """The radix tree of `inputs` (non-empty token id lists).

    Args:
        inputs: the sequences' token ids.
        min_shared: keep a segment shared only if sharing it saves at least this many token
            computations ((children - 1) x its length); else each child computes it again.

    Returns:
        The tree: its segments, parents before children, and where each sequence ends.
    """
    if any(not x for x in inputs):
        raise ValueError("build_tree needs non-empty sequences")
    order = sorted(range(len(inputs)), key=lambda i: (inputs[i], i))
    segments: list[Segment] = []
    ends = [-1] * len(inputs)
    stack: list[tuple[list[int], int, int]] = [(order, 0, -1)] if inputs else []
    while stack:
        group, offset, parent = stack.pop()
        cur, ended, longest = offset, [], group[-1]
        while True:  # extend through sequences ending on the way (one conversation's turns)
            cur += _common(inputs[group[0]], inputs[group[-1]], cur)
            here = [i for i in group if len(inputs[i]) == cur]
            ended += here
            group = [i for i in group if len(inputs[i]) > cur]
            parts: list[list[int]] = []
            for i in group:  # sorted: the sequences continuing with one token are contiguous
                if parts and inputs[parts[-1][0]][cur] == inputs[i][cur]:
                    parts[-1].append(i)
                else:
                    parts.append([i])
            if len(parts) != 1 or not here:
                break
            group = parts[0]
        if cur > offset:  # (only a root group can branch at its first token)
            segments.append(Segment(inputs[longest][offset:cur], offset, parent))
            parent = len(segments) - 1
        for i in ended:
            ends[i] = parent
        stack.extend((p, cur, parent) for p in reversed(parts))
    return _push_down(PrefixTree(segments, ends, [len(x) for x in inputs]), min_shared)


def _push_down(tree: PrefixTree, min_shared: int) -> PrefixTree:
    """Segments whose sharing saves fewer than `min_shared` tokens merged into their children."""
    segs = tree.segments
    children: list[list[int]] = [[] for _ in segs]
    for k, s in enumerate(segs):
        if s.parent >= 0:
            children[s.parent].append(k)
    gone = [False] * len(segs)
    moved: dict[int, int] = {}  # a removed segment -> the child its ending sequences moved to
    for k, s in enumerate(segs):  # parents before children: a child sees its grown length
        kids = children[k]
        if not kids or (len(kids) - 1) * len(s.tokens) >= min_shared:
            continue
        for c in kids:
            child = segs[c]
            child.tokens, child.start, child.parent = s.tokens + child.tokens, s.start, s.parent
        gone[k], moved[k] = True, kids[0]
        if s.parent >= 0:
            children[s.parent] = [c for c in children[s.parent] if c != k] + kids
    keep = [k for k in range(len(segs)) if not gone[k]]
    new = {k: n for n, k in enumerate(keep)}

    def alive(k: int) -> int:
        while k >= 0 and gone[k]:
            k = moved[k]
        return k

    out = [
        Segment(segs[k].tokens, segs[k].start, new[segs[k].parent] if segs[k].parent >= 0 else -1)
        for k in keep
    ]
    return PrefixTree(out, [new[alive(e)] for e in tree.ends], tree.lengths)


def buckets_by_length(lengths: list[int], bucket_cost: int) -> list[list[int]]:
    """Indices into `lengths` grouped into padded batches at the least cost: each batch costs
    its rows x its longest length (padding included) plus `bucket_cost` (another pass).

    Args:
        lengths: the rows' lengths.
        bucket_cost: what one more batch costs, in token computations.

    Returns:
        The batches, longest rows first.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: the first j rows (longest first) batched
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):  # rows i..j-1 in one batch, padded to row i's length
            cost = best[i] + (j - i) * lengths[order[i]] + bucket_cost
            if cost < best[j]:
                best[j], cut[j] = cost, i
    out, j = [], n
    while j > 0:
        out.append(order[cut[j] : j])
        j = cut[j]
    return out[::-1]


@dataclass
class _Bucket:
    segments: list[int]
    input_ids: torch.Tensor  # (R, S)
    position_ids: torch.Tensor  # (R, S)
    lengths: torch.Tensor  # (R,)
    past_lengths: torch.Tensor  # (R,)
    sources: list[int]  # whose keys/values the past gathers from, in order (-1: the outer plan)
    past_index: torch.Tensor | None  # (R, P) into those keys/values, concatenated
    keep: bool  # later buckets read this one's keys/values


OUTER = -1  # a past source: the keys and values of the plan's outer plan (its trunk)


@dataclass
class TreePlan:
    """Segments of a `PrefixTree` scheduled into padded buckets, with where each sequence
    position's hidden state lands.

    A plan may compute a subset of the tree (`segments`), the rest of each path coming from
    an `outer` plan run before it: the trunk of segments that several micro-batches share,
    computed once per step (`tree_hidden(..., outer=...)`).

    Args:
        tree: the segments.
        pad_id: the token id of padding.
        device: where the tensors go.
        bucket_cost: what one more pass costs, in token computations (see `buckets_by_length`).
        segments: the segments this plan computes, parents before children (default: all);
            their ancestors outside it are the outer plan's.
        outer: the plan that computes those ancestors.
    """

    tree: PrefixTree
    pad_id: int
    device: torch.device | str = "cpu"
    bucket_cost: int = 32
    segments: list[int] | None = None
    outer: TreePlan | None = None
    buckets: list[_Bucket] = field(init=False)
    _where: dict[int, tuple[int, int, int]] = field(init=False)  # segment -> (bucket, row, flat)

    def __post_init__(self):
        segs = self.tree.segments
        mine = list(range(len(segs))) if self.segments is None else list(self.segments)
        depth: dict[int, int] = {}
        for k in mine:  # parents come before children
            parent = segs[k].parent
            depth[k] = depth[parent] + 1 if parent in depth else 0
        parents = {segs[k].parent for k in mine}
        self.buckets, self._where = [], {}
        flat = self.outer.computed_tokens() if self.outer is not None else 0
        for d in range(max(depth.values(), default=-1) + 1):
            level = [k for k in mine if depth[k] == d]
            for group in buckets_by_length([len(segs[k].tokens) for k in level], self.bucket_cost):
                rows = [level[g] for g in group]
                b = len(self.buckets)
                S = max(len(segs[k].tokens) for k in rows)
                ids = torch.full((len(rows), S), self.pad_id, dtype=torch.long)
                pos = torch.zeros((len(rows), S), dtype=torch.long)
                for r, k in enumerate(rows):
                    n, start = len(segs[k].tokens), segs[k].start
                    ids[r, :n] = torch.tensor(segs[k].tokens)
                    pos[r] = torch.arange(start, start + S)  # padding continues the count
                    self._where[k] = (b, r, flat + r * S)
                flat += len(rows) * S
                past = [self._past_positions(k) for k in rows]
                sources = sorted({src for p in past for src, _ in p})
                base, total = {}, 0
                for src in sources:
                    base[src] = total
                    total += (
                        self.outer.computed_tokens()
                        if src == OUTER
                        else self.buckets[src].input_ids.numel()
                    )
                P = max(len(p) for p in past)
                index = None
                if P:
                    index = torch.zeros((len(rows), P), dtype=torch.long)
                    for r, p in enumerate(past):
                        if p:
                            index[r, : len(p)] = torch.tensor([base[src] + i for src, i in p])
                self.buckets.append(
                    _Bucket(
                        rows,
                        ids.to(self.device),
                        pos.to(self.device),
                        torch.tensor([len(segs[k].tokens) for k in rows]),
                        torch.tensor([len(p) for p in past]),
                        sources,
                        None if index is None else index.to(self.device),
                        any(k in parents for k in rows),
                    )
                )

    def _past_positions(self, k: int) -> list[tuple[int, int]]:
        """(source, flat position within it) of every token before segment k, in order."""
        out: list[tuple[int, int]] = []
        path, s = [], self.tree.segments[k].parent
        while s >= 0:
            path.append(s)
            s = self.tree.segments[s].parent
        for s in reversed(path):
            n = len(self.tree.segments[s].tokens)
            if s in self._where:
                b, r, _ = self._where[s]
                S = self.buckets[b].input_ids.shape[1]
                out += [(b, r * S + i) for i in range(n)]
            else:
                if self.outer is None or s not in self.outer._where:
                    raise ValueError(f"segment {s} is in neither this plan nor its outer plan")
                start = self.outer._where[s][2]
                out += [(OUTER, start + i) for i in range(n)]
        return out

    def index(self, seq: int, position: int) -> int:
        """Where position `position` of sequence `seq` is in `tree_hidden`'s hidden states (the
        outer plan's positions first)."""
        for s in self.tree.path(seq):
            seg = self.tree.segments[s]
            if position < seg.start + len(seg.tokens):
                where = self._where.get(s) or self.outer._where[s]
                return where[2] + position - seg.start
        raise IndexError(f"sequence {seq} has {self.tree.lengths[seq]} tokens, not {position + 1}")

    def computed_tokens(self) -> int:
        """Positions the buckets compute, padding included."""
        return sum(b.input_ids.numel() for b in self.buckets)

    def distinct_tokens(self) -> int:
        """Tokens of the segments this plan computes, padding not counted."""
        return sum(n for _, n in self.spans())

    def spans(self) -> list[tuple[int, int]]:
        """(position of the first token, tokens) of each segment this plan computes."""
        segs = self.tree.segments
        return [(segs[k].start, len(segs[k].tokens)) for k in self._where]

    def mask(self, b: int, kind: str, dtype: torch.dtype) -> torch.Tensor:
        """Bucket b's 4D attention mask (R, 1, S, P + S): row r's queries see its past (its
        ancestors' tokens) and its own tokens causally; padding queries see their row causally.

        Args:
            b: the bucket.
            kind: "bool" (True: attend; sdpa) or "additive" (0 or the dtype's minimum; eager).
            dtype: the additive mask's dtype (the model's).

        Returns:
            The mask on the plan's device.
        """
        if kind not in MASK_KINDS:
            raise ValueError(f"mask kind must be one of {MASK_KINDS}, got {kind!r}")
        bucket = self.buckets[b]
        R, S = bucket.input_ids.shape
        P = 0 if bucket.past_index is None else bucket.past_index.shape[1]
        past = torch.arange(P)[None, :] < bucket.past_lengths[:, None]  # (R, P)
        own = torch.ones((S, S), dtype=torch.bool).tril()  # (S, S)
        allowed = torch.cat([past[:, None, :].expand(R, S, P), own[None].expand(R, S, S)], dim=-1)
        allowed = allowed[:, None].to(self.device)
        if kind == "bool":
            return allowed
        zero = torch.zeros((), dtype=dtype, device=self.device)
        return torch.where(allowed, zero, torch.finfo(dtype).min)


@dataclass
class TreeOutput:
    """What `tree_hidden` computed: the final hidden states of every position (the outer
    plan's first) and, when asked, every layer's keys and values in the same order."""

    hidden: torch.Tensor
    """(positions, hidden size)"""
    kv: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None
    """layer -> (keys, values), each (positions, key/value heads, head size)"""

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor held: hidden, then each layer's keys and values."""
        kv = [] if self.kv is None else [t for layer in sorted(self.kv) for t in self.kv[layer]]
        return [self.hidden, *kv]

    def detached(self) -> TreeOutput:
        """The same values as leaves of a new graph (requiring grad): passes built on them
        backpropagate into their `.grad`, to be carried on into this output's graph."""
        leaf = lambda t: t.detach().requires_grad_(True)
        kv = None if self.kv is None else {n: (leaf(k), leaf(v)) for n, (k, v) in self.kv.items()}
        return TreeOutput(leaf(self.hidden), kv)


class _TreeCache:
    """What an attention layer sees as its cache in `tree_hidden`: `update` keeps the bucket's
    own keys and values and returns them after the rows' past (gathered when first asked)."""

    def __init__(self, past: Callable[[int], tuple[torch.Tensor, torch.Tensor]] | None):
        self.past, self.own = past, {}

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.own[layer_idx] = (key_states, value_states)
        if self.past is None:
            return key_states, value_states
        k, v = self.past(layer_idx)
        return torch.cat([k, key_states], dim=-2), torch.cat([v, value_states], dim=-2)


def _flat(x: torch.Tensor) -> torch.Tensor:
    """(R, heads, S, d) keys or values as (R * S, heads, d)."""
    return x.transpose(1, 2).reshape(-1, x.shape[1], x.shape[3])


@contextlib.contextmanager
def _cache_through_checkpointing(decoder):
    """Inside the block, `decoder`'s gradient-checkpointed layers keep the tree's cache.

    transformers drops `past_key_values` from a checkpointed layer (a cache that grows would
    grow again when the backward recomputes the layer); `_TreeCache.update` only records the
    layer's own keys and values and returns them after the gathered past, so the recompute
    sees the same past and gives the same numbers."""
    layers = [
        m
        for m in decoder.modules()
        if getattr(m, "gradient_checkpointing", False) and hasattr(m, "_can_checkpoint_with_cache")
    ]
    before = [m.__dict__.get("_can_checkpoint_with_cache") for m in layers]
    for m in layers:
        m._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for m, was in zip(layers, before):
            if was is None:
                del m._can_checkpoint_with_cache  # back to the class's value
            else:
                m._can_checkpoint_with_cache = was


def tree_hidden(
    decoder, plan: TreePlan, mask_kind: str, outer: TreeOutput | None = None, keep_kv: bool = False
) -> TreeOutput:
    """The decoder's final hidden states at every position `plan` computes.

    Args:
        decoder: a transformers decoder (`model.get_decoder()`: embeddings, layers, final
            norm) whose attention layers call `past_key_values.update` and take a 4D mask.
        plan: the buckets.
        mask_kind: "bool" for sdpa, "additive" for eager attentions.
        outer: the output of `plan.outer` (computed with `keep_kv`), when the plan has one.
        keep_kv: also return every layer's keys and values (for plans built on this one).

    Returns:
        The hidden states, flattened bucket by bucket after the outer plan's (`plan.index`).
    """
    if (plan.outer is None) != (outer is None):
        raise ValueError("pass the outer plan's output exactly when the plan has an outer plan")
    if outer is not None and outer.kv is None:
        raise ValueError("the outer plan's output has no keys and values (keep_kv=True)")
    dtype = next(decoder.parameters()).dtype
    kv: dict[int, dict[int, tuple[torch.Tensor, torch.Tensor]]] = {}  # source -> layer -> flat
    if outer is not None:
        kv[OUTER] = outer.kv
    # every bucket's token embeddings in one lookup: its backward fills one dense
    # (vocabulary, hidden) gradient for the plan, not one per bucket (docs/results/benchmarks.md).
    # A plan may have no buckets: its sequences lie wholly in the outer plan.
    embeds = (
        decoder.get_input_embeddings()(
            torch.cat([bucket.input_ids.reshape(-1) for bucket in plan.buckets])
        ).split([bucket.input_ids.numel() for bucket in plan.buckets])
        if plan.buckets
        else ()
    )
    out = []
    for b, bucket in enumerate(plan.buckets):
        past = None
        if bucket.past_index is not None:
            R, P = bucket.past_index.shape
            flat_index = bucket.past_index.reshape(-1)

            def past(layer: int, bucket=bucket, R=R, P=P, flat_index=flat_index):
                pieces = [kv[src][layer] for src in bucket.sources]
                keys = torch.cat([k for k, _ in pieces]) if len(pieces) > 1 else pieces[0][0]
                values = torch.cat([v for _, v in pieces]) if len(pieces) > 1 else pieces[0][1]
                shape = (R, P, keys.shape[1], keys.shape[2])
                return (
                    keys.index_select(0, flat_index).view(shape).transpose(1, 2),
                    values.index_select(0, flat_index).view(shape).transpose(1, 2),
                )

        cache = _TreeCache(past)
        with _cache_through_checkpointing(decoder):
            hidden = decoder(
                inputs_embeds=embeds[b].view(*bucket.input_ids.shape, -1),
                attention_mask=plan.mask(b, mask_kind, dtype),
                position_ids=bucket.position_ids,
                past_key_values=cache,
                use_cache=False,  # the tree cache is passed in (no model-made cache)
            ).last_hidden_state
        if bucket.keep or keep_kv:
            kv[b] = {layer: (_flat(k), _flat(v)) for layer, (k, v) in cache.own.items()}
        out.append(hidden.reshape(-1, hidden.shape[-1]))
    if outer is not None:
        out.insert(0, outer.hidden)
    kept = None
    if keep_kv:
        own = [kv[b] for b in range(len(plan.buckets))]
        if outer is not None:
            own.insert(0, outer.kv)
        kept = {
            layer: tuple(torch.cat([x[layer][i] for x in own]) for i in (0, 1)) for layer in own[0]
        }
    return TreeOutput(torch.cat(out) if len(out) > 1 else out[0], kept)
