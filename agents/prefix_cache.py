"""A prefix KV cache: the keys and values of token sequences already run through a model,
kept across calls so that a prompt reuses the longest prefix computed before.

The sequences form a radix tree over token ids (as SGLang's RadixAttention): each node holds
a segment of tokens and the keys and values of those tokens in every layer, one
`(layers, 2, kv heads, segment length, head dim)` tensor on the model's device (keys at
index 0, values at 1: a segment is copied into a batch in one operation). A path from the root
spells a sequence whose prefix KV is the concatenation of the path's segments; two prompts
with a common opening (the game rules, a conversation so far) share the nodes of that
opening, so it is stored once.

- `lookup(space, tokens, limit)` finds the longest cached prefix of `tokens` (at most
  `limit` tokens), a `Hit` that copies its keys and values into a batch (`Hit.copy_into`);
- `insert(space, tokens, kv_of)` adds the part of `tokens` not cached yet, asking `kv_of(i, j)`
  for the keys and values of `tokens[i:j]` only (a node split where a new sequence leaves an
  old one);
- `spaces` keep sequences apart that must never share (one per LoRA adapter: the same tokens
  have other keys and values under another adapter);
- the stored tensors stay under `max_bytes`: after an insert, the least recently used leaves
  (looked up or inserted longest ago) are evicted until they fit; a segment larger than the
  bound on its own is not kept;
- `validate(stamp)` drops everything when the stamp (the owner's fingerprint of the weights)
  differs from the last one: keys and values are only valid for the weights that made them.

A node's tensors are its own copies (a split copies both halves), so evicting a node frees
its bytes. The tree holds no model: `agents.transformers_backend` runs the forward passes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import torch

KV = torch.Tensor  # (layers, 2, kv heads, T, head dim): keys [:, 0], values [:, 1]


@dataclass(eq=False)
class _Node:
    """A segment of tokens after its parent's, with their keys and values."""

    tokens: tuple[int, ...]
    kv: KV
    parent: _Node | None
    children: dict[int, _Node] = field(default_factory=dict)
    used: int = 0  # the tick of the last lookup or insert that walked through it

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()


@dataclass
class Hit:
    """The longest cached prefix of a sequence: `length` tokens, as (node, tokens used of its
    segment) from the root down."""

    length: int
    segments: list[tuple[_Node, int]]

    def copy_into(self, batch: torch.Tensor, row: int, end: int) -> None:
        """Write the prefix's keys and values into row `row` of a batch tensor
        `(layers, 2, B, kv heads, W, head dim)`, its last token at column `end - 1`."""
        start = end - self.length
        for node, n in self.segments:
            batch[:, :, row, :, start : start + n] = node.kv[:, :, :, :n]
            start += n

    def like(self) -> torch.Tensor | None:
        """A stored tensor (its shape but the length, dtype and device are the batch's); None when empty."""
        return self.segments[0][0].kv if self.segments else None


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Length of the common prefix of two token tuples."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    k = 0
    while a[k] == b[k]:
        k += 1
    return k


class PrefixCache:
    """Keys and values of token sequences, reused by their longest prefix (see the module doc).

    Args:
        max_bytes: the most bytes of keys and values kept (> 0).
    """

    def __init__(self, max_bytes: int):
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._roots: dict[Hashable, _Node] = {}
        self._tick = 0
        self._stamp: object = None

    def clear(self) -> None:
        """Drop every cached sequence."""
        self._roots, self.nbytes = {}, 0

    def validate(self, stamp: object) -> None:
        """Drop everything if `stamp` (a fingerprint of the weights) is not the last one seen."""
        if stamp != self._stamp:
            self.clear()
            self._stamp = stamp

    def tokens(self) -> int:
        """Tokens held (a node's segment counts once, however many sequences share it)."""
        return sum(len(n.tokens) for n in self._nodes())

    def lookup(self, space: Hashable, tokens: list[int] | tuple[int, ...], limit: int) -> Hit:
        """The longest cached prefix of `tokens` in `space`, at most `limit` tokens long."""
        self._tick += 1
        node, pos, segments = self._roots.get(space), 0, []
        want = tuple(tokens[: max(limit, 0)])
        while node is not None and pos < len(want):
            child = node.children.get(want[pos])
            if child is None:
                break
            n = _common(child.tokens, want[pos:])
            child.used = self._tick
            segments.append((child, n))
            pos += n
            node = child if n == len(child.tokens) else None
        return Hit(pos, segments)

    def insert(
        self, space: Hashable, tokens: list[int] | tuple[int, ...], kv_of: Callable[[int, int], KV]
    ) -> None:
        """Cache `tokens` in `space`: `kv_of(i, j)` gives the keys and values of `tokens[i:j]`
        (asked once, for the part not cached yet); then evict down to `max_bytes`."""
        self._tick += 1
        tokens = tuple(tokens)
        node = self._roots.setdefault(space, _Node((), torch.empty(0), None))
        pos = 0
        while pos < len(tokens):
            child = node.children.get(tokens[pos])
            if child is None:
                break
            n = _common(child.tokens, tokens[pos:])
            child.used = self._tick
            if n < len(child.tokens):
                if pos + n == len(tokens):
                    return  # already a prefix of a cached sequence
                child = self._split(child, n)
            node, pos = child, pos + n
        if pos == len(tokens):
            return
        leaf = _Node(tokens[pos:], kv_of(pos, len(tokens)), node, used=self._tick)
        if leaf.nbytes > self.max_bytes:
            return
        node.children[leaf.tokens[0]] = leaf
        self.nbytes += leaf.nbytes
        if self.nbytes > self.max_bytes:
            self._evict()

    def _split(self, node: _Node, n: int) -> _Node:
        """Cut `node`'s segment after `n` tokens; returns the new head, `node` its only child."""
        head = _Node(
            node.tokens[:n],
            node.kv[:, :, :, :n].clone(),
            node.parent,
            used=node.used,
        )
        node.tokens = node.tokens[n:]
        node.kv = node.kv[:, :, :, n:].clone()
        head.parent.children[head.tokens[0]] = head
        head.children[node.tokens[0]] = node
        node.parent = head
        return head

    def _nodes(self):
        stack = [c for root in self._roots.values() for c in root.children.values()]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def _evict(self) -> None:
        """Remove least recently used leaves (a parent left childless becomes one) until the
        bytes held fit `max_bytes`."""
        heap = [(n.used, id(n), n) for n in self._nodes() if not n.children]
        heapq.heapify(heap)
        while self.nbytes > self.max_bytes and heap:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            del parent.children[node.tokens[0]]
            self.nbytes -= node.nbytes
            if not parent.children and parent.parent is not None:
                heapq.heappush(heap, (parent.used, id(parent), parent))
