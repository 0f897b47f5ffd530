"""The token-level policy loss: PPO ratio clipping, dual clip, k3 KL, entropy bonus.

Per completion token t of sequence i, with ratio rho = exp(logp_new - logp_old)::

    pg   = max(-A rho, -A clip(rho, 1 - clip_low, 1 + clip_high))
    pg   = min(pg, -A dual_clip)               if A < 0 and dual_clip is set (c > 1)
    k3   = exp(logp_ref - logp_new) - (logp_ref - logp_new) - 1   (>= 0; clamped to 10)
    loss = pg + kl_coef k3 - entropy_coef H + floor_coef KL(uniform || pi)
                + magnet_coef KL(pi || magnet)

Aggregation over the (B, T) token grid (`mask` marks completion tokens):

- `token_mean`            sum of all token losses / number of tokens;
- `seq_mean_token_mean`   mean over sequences of each sequence's token mean (MARS);
- `seq_mean_token_sum_norm` sum of all token losses / (sequences x `norm_constant`)
  (Dr.GRPO; SPIRAL uses a constant of 4096).

Adaptive entropy bonus (Skywork-OR1's adaptive entropy control): with `entropy_target` > 0
the learner (`training.learner.Learner.step`) starts from `entropy_coef` and after every
optimizer step moves the coefficient up by `entropy_coef_step` when the step's mean token entropy was
below the target and down by it otherwise, within [0, `entropy_coef_max`]: exploration is
bought back only while the policy is collapsing.

Probability floor (`floor_coef`): KL(uniform || pi) over a constrained turn's allowed moves
(the learner computes it; 0 on free-text tokens). The entropy bonus's pull on a move of
probability p is ~ p log p and vanishes as p -> 0, so a move the policy has written off (an
edge cell that blocks a threat) is never sampled again; this term's pull on a move's logit
is 1/K - p, so no allowed move's probability collapses towards 0 while its advantage is not
negative.
`floor_decay_steps` anneals it linearly to `floor_coef_final`: the floor keeps every move
sampled while the policy finds out what each is worth, then lets go, since a floor that stays
also holds a move the policy has rightly written off at a bounded probability.
`floor_off_step` drops it to 0 at one optimizer step (a small floor held while the states of
the policy separate, then let go at once).

Magnet (`magnet_coef`): the exact KL(pi || magnet) over a constrained turn's allowed moves (the
learner computes both distributions; 0 on free-text tokens), the magnet a frozen copy of the
policy that `learner.magnet_every` refreshes: Magnetic Mirror Descent's reverse-KL pull toward
a moving magnet (Sokota et al., ICLR 2023), which turns self-play's cycling in a zero-sum game
into last-iterate convergence (docs/concepts/estimators/magnet.md). `magnet_decay_steps` anneals
its weight linearly to `magnet_coef_final`.

Gradient accumulation: pass the whole batch's `num_tokens` / `num_seqs` and every
micro-batch's loss is its share of the full-batch loss, so the summed gradients equal one
big-batch step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.typed_config import above, at_least, check_fields, option

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")


@dataclass
class LossConfig:
    clip_low: float = 0.2
    """PPO clip range below 1 (ratio floor 1 - clip_low)"""
    clip_high: float = 0.2
    """PPO clip range above 1 (ratio ceiling 1 + clip_high)"""
    dual_clip: float | None = None
    """dual-clip constant c > 1 bounding the loss of negative-advantage tokens (MARS: 1.4); None: off"""
    kl_coef: float = option(0.0, check=at_least(0))
    """weight of the k3 KL to the frozen reference (MARS: 0.2); 0 skips the reference pass"""
    entropy_coef: float = 0.0
    """weight of the entropy bonus (with entropy_target > 0: its starting value)"""
    entropy_target: float = 0.0
    """> 0: adapt entropy_coef after every step towards keeping the mean token entropy at this value; 0: fixed"""
    entropy_coef_step: float = 0.002
    """how far entropy_coef moves per optimizer step when adaptive"""
    entropy_coef_max: float = 0.1
    """ceiling of the adaptive coefficient"""
    floor_coef: float = 0.0
    """weight of KL(uniform || pi) over a constrained turn's allowed moves (a probability floor; 0: off)"""
    floor_decay_steps: int = 0
    """> 0: floor_coef falls linearly to floor_coef_final over this many optimizer steps (explore first, then
    let the policy sharpen); 0: fixed"""
    floor_coef_final: float = 0.0
    """the floor's weight once floor_decay_steps have passed"""
    floor_off_step: int = 0
    """> 0: the floor's weight is 0 from this optimizer step on, whatever the schedule above says (a
    small floor held while the policy's states separate, then dropped; 0: never)"""
    magnet_coef: float = 0.0
    """weight of the exact KL(pi || magnet) over a constrained turn's allowed moves, the magnet a frozen
    copy of the policy refreshed every learner.magnet_every optimizer steps (Magnetic Mirror Descent;
    0: off)"""
    magnet_decay_steps: int = 0
    """> 0: magnet_coef falls linearly to magnet_coef_final over this many optimizer steps; 0: fixed"""
    magnet_coef_final: float = 0.0
    """the magnet term's weight once magnet_decay_steps have passed"""
    aggregation: str = option("seq_mean_token_mean", choices=AGGREGATIONS)
    """one of AGGREGATIONS"""
    norm_constant: float = option(4096.0, check=above(0))
    """Dr.GRPO's constant per-sequence normaliser (seq_mean_token_sum_norm)"""

    def __post_init__(self):
        check_fields(self)
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (or None), got {self.dual_clip}")
        if self.clip_low < 0 or self.clip_high < 0 or self.clip_low >= 1:
            raise ValueError(
                f"clip ranges must be clip_low in [0, 1), clip_high >= 0; got {self.clip_low}, {self.clip_high}"
            )
        if (
            min(
                self.entropy_coef,
                self.entropy_target,
                self.entropy_coef_step,
                self.entropy_coef_max,
                self.floor_coef,
                self.floor_decay_steps,
                self.floor_coef_final,
            )
            < 0
        ):
            raise ValueError(
                "entropy_coef, entropy_target, entropy_coef_step, entropy_coef_max, floor_coef, floor_decay_steps "
                "and floor_coef_final must be >= 0"
            )
        if self.floor_off_step < 0:
            raise ValueError(f"floor_off_step must be >= 0, got {self.floor_off_step}")
        if min(self.magnet_coef, self.magnet_decay_steps, self.magnet_coef_final) < 0:
            raise ValueError("magnet_coef, magnet_decay_steps and magnet_coef_final must be >= 0")


def _linear(start: float, end: float, steps: int, step: int) -> float:
    """`start` falling (or rising) linearly to `end` over `steps` optimizer steps; `start` if steps <= 0."""
    if steps <= 0:
        return start
    return start + (end - start) * min(1.0, step / steps)


def floor_coef_at(step: int, cfg: LossConfig) -> float:
    """The probability floor's weight at optimizer step `step` (see `floor_decay_steps`, `floor_off_step`)."""
    if cfg.floor_off_step and step >= cfg.floor_off_step:
        return 0.0
    return _linear(cfg.floor_coef, cfg.floor_coef_final, cfg.floor_decay_steps, step)


def magnet_coef_at(step: int, cfg: LossConfig) -> float:
    """The magnet term's weight at optimizer step `step` (see `magnet_decay_steps`)."""
    return _linear(cfg.magnet_coef, cfg.magnet_coef_final, cfg.magnet_decay_steps, step)


def adapt_entropy_coef(coef: float, entropy: float, cfg: LossConfig) -> float:
    """The next step's entropy coefficient (see the module docstring); fixed when entropy_target is 0."""
    if cfg.entropy_target <= 0:
        return coef
    coef += cfg.entropy_coef_step if entropy < cfg.entropy_target else -cfg.entropy_coef_step
    return min(max(coef, 0.0), cfg.entropy_coef_max)


def k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(new || ref) per token: e^d - d - 1 with d = ref - new."""
    d = ref_logp - logp
    return (torch.exp(d) - d - 1).clamp(max=10.0)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: LossConfig,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    floor: torch.Tensor | None = None,
    magnet: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The aggregated loss and its metrics.

    Args:
        logp: (B, T) log-probabilities of the taken tokens under the new policy (with grad).
        old_logp: (B, T) log-probabilities of the taken tokens under the behaviour policy.
        advantages: (B,) one per sequence, or (B, T) per token.
        mask: (B, T) 1 on completion tokens.
        ref_logp: (B, T) reference log-probabilities; needed when cfg.kl_coef > 0.
        entropy: (B, T) per-token entropy of the new policy; needed when cfg.entropy_coef > 0.
        floor: (B, T) KL(uniform || pi) per token (0 off constrained tokens); needed when cfg.floor_coef > 0.
        magnet: (B, T) KL(pi || magnet) per token (0 off constrained tokens); needed when cfg.magnet_coef > 0.
        num_tokens: the full batch's token count (gradient accumulation); default: this batch's.
        num_seqs: the full batch's sequence count; default: this batch's.
    Returns:
        (loss, metrics): metrics are token means over this batch (`tokens` is its count)
        plus ratio min/max.
    """
    mask = mask.to(logp.dtype)
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    advantages = advantages.to(logp.dtype).expand_as(logp)
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    pg, pg1, pg2, dual = _clipped_pg(advantages, ratio, cfg)
    per_token, kl = _add_penalties(pg, cfg, logp, ref_logp, entropy, floor, magnet)
    loss, tok_count = _aggregate(per_token, mask, cfg, num_tokens, num_seqs)
    with torch.no_grad():
        denom = tok_count.clamp(min=1)
        clipped = (pg2 > pg1) & ~dual
        m = mask.bool()
        metrics = {
            "tokens": float(tok_count),
            "pg_loss": float((pg * mask).sum() / denom),
            "clip_frac": float((clipped.to(mask.dtype) * mask).sum() / denom),
            "dual_clip_frac": float((dual.to(mask.dtype) * mask).sum() / denom),
            "ratio_mean": float((ratio * mask).sum() / denom),
            "ratio_min": float(ratio[m].min()) if m.any() else 1.0,
            "ratio_max": float(ratio[m].max()) if m.any() else 1.0,
            # k3 of behaviour vs new: how far this update has moved from the rollout policy
            "approx_kl_behaviour": float((k3(logp, old_logp) * mask).sum() / denom),
        }
        terms = {"kl_ref": kl, "entropy": entropy, "uniform_kl": floor, "magnet_kl": magnet}
        for name, term in terms.items():
            if term is not None:
                metrics[name] = float((term * mask).sum() / denom)
    return loss, metrics


def _clipped_pg(
    advantages: torch.Tensor, ratio: torch.Tensor, cfg: LossConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped policy-gradient term per token, then the dual clip where A < 0.

    Returns:
        (pg, pg1, pg2, dual): the term, its unclipped and clipped candidates, and where the
        dual clip bound it.
    """
    pg1 = -advantages * ratio
    pg2 = -advantages * ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
    pg = torch.maximum(pg1, pg2)
    dual = torch.zeros_like(pg, dtype=torch.bool)
    if cfg.dual_clip is not None:
        bound = -advantages * cfg.dual_clip
        dual = (advantages < 0) & (pg > bound)
        pg = torch.where(advantages < 0, torch.minimum(pg, bound), pg)
    return pg, pg1, pg2, dual


def _add_penalties(
    pg: torch.Tensor,
    cfg: LossConfig,
    logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    entropy: torch.Tensor | None,
    floor: torch.Tensor | None,
    magnet: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The per-token loss: `pg` plus the k3 KL, minus the entropy bonus, plus the floor and
    magnet terms, each where its coefficient is > 0 (ValueError if its input is missing).

    Returns:
        (per_token, kl): the loss per token and the k3 KL to the reference (None without).
    """
    per_token = pg
    kl = None
    if cfg.kl_coef > 0:
        if ref_logp is None:
            raise ValueError("kl_coef > 0 needs ref_logp")
        kl = k3(logp, ref_logp)
        per_token = per_token + cfg.kl_coef * kl
    if cfg.entropy_coef > 0:
        if entropy is None:
            raise ValueError("entropy_coef > 0 needs entropy")
        per_token = per_token - cfg.entropy_coef * entropy
    if cfg.floor_coef > 0:
        if floor is None:
            raise ValueError("floor_coef > 0 needs floor")
        per_token = per_token + cfg.floor_coef * floor
    if cfg.magnet_coef > 0:
        if magnet is None:
            raise ValueError("magnet_coef > 0 needs magnet")
        per_token = per_token + cfg.magnet_coef * magnet
    return per_token, kl


def _aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    cfg: LossConfig,
    num_tokens: float | None,
    num_seqs: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss over the (B, T) grid by `cfg.aggregation` (see the module docstring).

    Returns:
        (loss, tokens): the loss and this batch's completion-token count.
    """
    tok_count = mask.sum()
    seq_tokens = mask.sum(-1)  # (B,)
    n_tok = float(tok_count) if num_tokens is None else float(num_tokens)
    n_seq = float((seq_tokens > 0).sum()) if num_seqs is None else float(num_seqs)
    masked = per_token * mask
    if cfg.aggregation == "token_mean":
        loss = masked.sum() / max(n_tok, 1.0)
    elif cfg.aggregation == "seq_mean_token_mean":
        loss = (masked.sum(-1) / seq_tokens.clamp(min=1)).sum() / max(n_seq, 1.0)
    else:  # seq_mean_token_sum_norm
        loss = masked.sum() / (max(n_seq, 1.0) * cfg.norm_constant)
    return loss, tok_count
