"""A model's log-probabilities of a micro-batch's completion tokens (`training.sequences.MicroBatch`).

`micro_logprobs` gives the log-probabilities under the distribution the rollout sampled from:
`log_softmax(logits / temperature)` of the taken tokens, over the whole vocabulary or, on a
constrained turn, over `agents.constrained.allowed_token_ids` at each position (with every
completion token constrained, the LM head runs on the allowed tokens' rows only). With them, as
asked: the entropy, KL(uniform || pi) over the allowed tokens (the floor), the log-distribution
over the allowed tokens (for the magnet's KL, `magnet_kl`) and the last prompt token's final
hidden state (the value head's input). Micro-batches on a prefix tree read the segments they
share from one pass over them (`shared_trunk`).
"""

from __future__ import annotations

import contextlib

import torch

from training.precision import attention_implementation
from training.prefix_tree import tree_hidden
from training.sequences import MicroBatch, mask_kind, plain_lm_head


def _allowed_index(constrained: list[tuple[int, int, list[int]]], device):
    """(rows, cols, idx, valid) of constrained positions: idx (N, K) the allowed token ids,
    right-padded with 0 where `valid` is False."""
    rows = torch.tensor([r for r, _, _ in constrained], device=device)
    cols = torch.tensor([c for _, c, _ in constrained], device=device)
    K = max(len(a) for _, _, a in constrained)
    idx = torch.zeros((len(constrained), K), dtype=torch.long)
    valid = torch.zeros((len(constrained), K), dtype=torch.bool)
    for n, (_, _, a) in enumerate(constrained):
        idx[n, : len(a)] = torch.tensor(a)
        valid[n, : len(a)] = True
    return rows, cols, idx.to(device), valid.to(device)


def _masked_entropy(sub: torch.Tensor, sub_lse: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Entropy per row of the distribution over the allowed tokens: sub (N, K) logits, -inf
    where `valid` is False; sub_lse (N,) their logsumexp."""
    p = torch.softmax(sub, dim=-1)
    return sub_lse - (p * sub.masked_fill(~valid, 0.0)).sum(-1)


def _uniform_kl(sub: torch.Tensor, sub_lse: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """KL(uniform || p) per row over the allowed tokens (`_masked_entropy`'s arguments): 0 for a
    uniform p, growing without bound as any allowed token's probability goes to 0."""
    logp = (sub - sub_lse[:, None]).masked_fill(~valid, 0.0)
    k = valid.sum(-1).clamp(min=1)
    return -logp.sum(-1) / k - torch.log(k.to(sub.dtype))


def _allowed_logdist(sub: torch.Tensor, sub_lse: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Log-probabilities over the allowed tokens per row (`_masked_entropy`'s arguments), 0 where
    `valid` is False."""
    return (sub - sub_lse[:, None]).masked_fill(~valid, 0.0)


def magnet_kl(logq: torch.Tensor, logm: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """KL(pi || magnet) per row over the allowed tokens: sum_k pi_k (log pi_k - log m_k).

    Args:
        logq: (N, K) the policy's log-probabilities over the allowed tokens (0 where not valid).
        logm: (N, K) the magnet's, at the same positions and tokens.
        valid: (N, K) which of the K columns are allowed tokens.

    Returns:
        (N,) the exact KL of each row's distribution to the magnet's (0 for one allowed token).
    """
    p = logq.exp() * valid
    return (p * (logq - logm)).sum(-1)


def micro_logprobs(
    model,
    mb: MicroBatch,
    entropy_mode: str | None,
    *,
    attention: str | None,
    temperature: float,
    hidden: bool = False,
):
    """`model`'s log-probabilities of `mb`'s completion tokens, and what the loss may add to them.

    Args:
        model: the policy, the reference or the magnet.
        mb: the micro-batch.
        entropy_mode: None (skip the entropy and the floor), "metric" (computed without grad)
            or "grad".
        attention: the attention implementation of the pass (None: the model's own).
        temperature: the rollouts' sampling temperature (the logits are divided by it).
        hidden: also return the last prompt token's final hidden state.

    Returns:
        (logp, entropy or None, state or None, floor or None, allowed or None): logp and entropy
        (B, C) under the (possibly masked) sampling distribution; state (B, H) the last prompt
        token's final hidden state; floor (B, C) KL(uniform || pi) on constrained tokens; allowed
        (N, K) the log-distribution over the allowed tokens at each of `mb.constrained`'s positions.
    """
    if mb.constrained and len(mb.constrained) == int(mb.mask.sum()) and plain_lm_head(model):
        return _constrained_logprobs(model, mb, entropy_mode, attention, temperature)
    logits, state = _logits(model, mb, attention, temperature, hidden)
    lse = torch.logsumexp(logits, dim=-1)  # (B, C)
    taken = logits.gather(-1, mb.targets.unsqueeze(-1)).squeeze(-1)  # (B, C)
    entropy = floor = allowed = None
    if entropy_mode is not None:
        with torch.set_grad_enabled(entropy_mode == "grad" and torch.is_grad_enabled()):
            entropy = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    if mb.constrained:
        rows, cols, idx, valid = _allowed_index(mb.constrained, logits.device)
        sub = logits[rows, cols].gather(-1, idx).masked_fill(~valid, float("-inf"))  # (N, K)
        sub_lse = torch.logsumexp(sub, dim=-1)
        allowed = _allowed_logdist(sub, sub_lse, valid)
        lse = lse.index_put((rows, cols), sub_lse)
        if entropy is not None:
            with torch.set_grad_enabled(entropy.requires_grad):
                entropy = entropy.index_put((rows, cols), _masked_entropy(sub, sub_lse, valid))
                floor = (
                    torch.zeros_like(lse).index_put((rows, cols), _uniform_kl(sub, sub_lse, valid))
                    * mb.mask
                )
    logp = (taken - lse) * mb.mask
    if entropy is not None:
        entropy = entropy * mb.mask
        floor = floor if floor is not None else torch.zeros_like(logp)  # free-text turns: no floor
    return logp, entropy, state, floor, allowed


def _logits(
    model, mb: MicroBatch, attention: str | None, temperature: float, hidden: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits (B, C, V) / temperature in fp32 at the positions that predict each completion
    token, the last prompt token's final hidden state (B, H) when `hidden`, else None)."""
    if mb.plan is not None:  # a plain head (`shared_prefix`): the logits of the gathered states
        last = hidden_states(model, mb, attention)  # (B, C, H)
        state = last[:, 0].float() if hidden else None
        head = model.get_output_embeddings()
        return head(last).float() / temperature, state
    C, L = mb.targets.shape[1], mb.input_ids.shape[1]
    # the last C positions as an index tensor, not the int C: transformers slices `[:, -C:]`
    # for an int, a strided view the LM head's matmul runs as a batched one, whose weight
    # gradient went through a (B, hidden, vocab) temporary
    keep = torch.arange(L - C, L, device=mb.input_ids.device)
    with attention_implementation(model, attention):
        out = model(
            input_ids=mb.input_ids,
            attention_mask=mb.attention_mask,
            position_ids=mb.position_ids,
            logits_to_keep=keep,
            use_cache=False,
            output_hidden_states=hidden,
        )
    state = out.hidden_states[-1][:, -C].float() if hidden else None  # the final norm is applied
    return out.logits.float() / temperature, state  # (B, C, V)


def _constrained_logprobs(
    model, mb: MicroBatch, entropy_mode: str | None, attention: str | None, temperature: float
):
    """`micro_logprobs` when every completion token was constrained: the LM head runs on the
    allowed tokens' rows of its weight only, never over the whole vocabulary (whose softmax
    and its backward would dominate a small model's step)."""
    B, C = mb.targets.shape
    hidden = hidden_states(model, mb, attention)
    head = model.get_output_embeddings()
    dev = hidden.device
    rows, cols, idx, valid = _allowed_index(mb.constrained, dev)
    # logits of the allowed tokens: one matmul against the distinct rows of the head, then
    # a gather (indexing the head per (position, token) would make its gradient a
    # scatter-add over duplicates, whose summation order varies run to run)
    uniq, where = torch.unique(idx, return_inverse=True)
    # in the head's dtype, then fp32: the logits round as the full head's do (bf16 policy)
    logits = hidden[rows, cols] @ head.weight[uniq].T  # (N, U)
    if head.bias is not None:
        logits = logits + head.bias[uniq]
    logits = logits.float()
    sub = logits.gather(-1, where)  # (N, K)
    sub = (sub / temperature).masked_fill(~valid, float("-inf"))  # (N, K)
    sub_lse = torch.logsumexp(sub, dim=-1)
    pick = (idx == mb.targets[rows, cols].unsqueeze(-1)) & valid
    taken = sub.masked_fill(~pick, 0.0).sum(-1)
    logp = torch.zeros((B, C), device=dev).index_put((rows, cols), taken - sub_lse)
    allowed = _allowed_logdist(sub, sub_lse, valid)
    entropy = floor = None
    if entropy_mode is not None:
        with torch.set_grad_enabled(entropy_mode == "grad" and torch.is_grad_enabled()):
            h = _masked_entropy(sub, sub_lse, valid)
            entropy = torch.zeros((B, C), device=dev).index_put((rows, cols), h) * mb.mask
            floor = (
                torch.zeros((B, C), device=dev).index_put(
                    (rows, cols), _uniform_kl(sub, sub_lse, valid)
                )
                * mb.mask
            )
    return logp * mb.mask, entropy, hidden[:, 0].float(), floor, allowed


def hidden_states(model, mb: MicroBatch, attention: str | None) -> torch.Tensor:
    """(B, C, H) the final hidden states (the final norm applied) at the positions that
    predict each completion token: the last prompt token's, then the completion's."""
    C = mb.targets.shape[1]
    with attention_implementation(model, attention):
        if mb.plan is None:
            return model.get_decoder()(
                input_ids=mb.input_ids,
                attention_mask=mb.attention_mask,
                position_ids=mb.position_ids,
                use_cache=False,
            ).last_hidden_state[:, -C:]
        kind = mask_kind(model)
        outer = None
        if mb.trunk is not None:  # computed for the whole pass (`shared_trunk`), or here
            outer = mb.trunk.state or tree_hidden(
                model.get_decoder(), mb.trunk.plan, kind, keep_kv=True
            )
        out = tree_hidden(model.get_decoder(), mb.plan, kind, outer=outer)
    return out.hidden[mb.hidden_index]


@contextlib.contextmanager
def shared_trunk(model, mbs: list[MicroBatch], attention: str | None, grad: bool = False):
    """Inside the block, the micro-batches of `mbs` read their shared trunk from one pass of
    `model` over it. `grad`: the micro-batches backpropagate into it (each `backward` inside
    the block), and the block's end carries those gradients on through the trunk's pass."""
    trunk = mbs[0].trunk if mbs else None
    if trunk is None:
        yield
        return
    with torch.set_grad_enabled(grad), attention_implementation(model, attention):
        out = tree_hidden(model.get_decoder(), trunk.plan, mask_kind(model), keep_kv=True)
    trunk.state = out.detached() if grad else out
    try:
        yield
        if grad:
            pairs = [
                (t, leaf.grad)
                for t, leaf in zip(out.tensors(), trunk.state.tensors())
                if leaf.grad is not None
            ]
            if pairs:  # with the forward's attention (checkpointed layers recompute)
                with attention_implementation(model, attention):
                    torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
    finally:
        trunk.state = None


def magnet_kl_at(
    mb: MicroBatch, allowed: torch.Tensor | None, mag: torch.Tensor | None, logp: torch.Tensor
) -> torch.Tensor:
    """(B, C) KL(pi || magnet) over the allowed tokens at each constrained position (0 elsewhere:
    a free-text token has no move distribution to compare); `allowed` the policy's
    log-distributions over the allowed tokens, `mag` the magnet's (`micro_logprobs`)."""
    out = torch.zeros_like(logp)
    if allowed is None or mag is None:
        return out
    rows, cols, _, valid = _allowed_index(mb.constrained, logp.device)
    return out.index_put((rows, cols), magnet_kl(allowed, mag, valid)) * mb.mask
