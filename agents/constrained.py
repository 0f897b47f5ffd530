"""Legal-move constrained decoding: which tokens may come next.

The one place that builds the mask, shared by the rollout backend (to sample) and the
learner (to recompute the same masked distribution). Each allowed string is tokenised on
its own with `add_special_tokens=False`; the token sequences form a trie. After a
completion prefix, the allowed next tokens are the trie children of the prefix's node,
plus EOS once the prefix spells a whole allowed string. A prefix that leaves the trie (or
follows EOS) allows nothing: `[]`.

Tries are cached per (tokenizer, allowed set), so a batch that offers the same legal
moves again costs a dict lookup and a walk of len(prefix) steps.
"""

from __future__ import annotations

_END = -1  # trie key marking "a whole allowed string ends here"
_CACHE: dict[tuple[int, tuple[str, ...]], tuple[object, dict]] = {}
_CACHE_MAX = 4096


def _build(tokenizer, allowed: tuple[str, ...]) -> dict:
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("constrained decoding needs a tokenizer with an eos_token_id")
    root: dict = {}
    encoded = tokenizer(list(allowed), add_special_tokens=False)["input_ids"] if allowed else []
    for s, ids in zip(allowed, encoded):
        if not ids:
            raise ValueError(f"allowed string {s!r} tokenises to nothing")
        node = root
        for t in ids:
            node = node.setdefault(t, {})
        node[_END] = True
    _freeze(root, eos)
    return root


def _freeze(node: dict, eos: int) -> None:
    """Store each node's allowed-next list under key None, computed once."""
    nxt = [t for t in node if t not in (_END, None)]
    if _END in node:
        nxt.append(eos)
    for _t, child in list(node.items()):
        if isinstance(child, dict):
            _freeze(child, eos)
    node[None] = nxt


def trie(tokenizer, allowed: list[str]) -> dict:
    """The (cached) token trie of `allowed` under `tokenizer`."""
    key = (id(tokenizer), tuple(allowed))
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is tokenizer:
        return hit[1]
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    root = _build(tokenizer, key[1])
    _CACHE[key] = (tokenizer, root)  # keeping the tokenizer alive keeps its id unique
    return root


def allowed_token_ids(tokenizer, allowed: list[str], prefix: list[int]) -> list[int]:
    """Token ids allowed after the completion `prefix` when the reply must be one of `allowed`.

    Args:
        tokenizer: a Hugging Face tokenizer (needs `eos_token_id`).
        allowed: the allowed completions (e.g. legal moves), tokenised one by one.
        prefix: completion token ids generated so far.
    Returns:
        The allowed next token ids (EOS once a whole allowed string is complete); `[]` when
        `prefix` is not a prefix of any allowed string's tokens.
    """
    node = trie(tokenizer, allowed)
    for t in prefix:
        node = node.get(t)
        if node is None:
            return []
    return node[None]
