"""The training loop's console lines: one per logged step, with its evaluation rows."""

from __future__ import annotations


def exploitability_words(row: dict) -> str:
    """An exploitability row in words: "exploitability X" (two-player zero-sum), else "NashConv X"."""
    if row["exploitability"] is None:
        return f"NashConv {row['nash_conv']:.4f}"
    return f"exploitability {row['exploitability']:.4f}"


def perfect_play_words(row: dict) -> str:
    """A perfect-play row (`training.periodic_eval.perfect_play_at`) in words."""
    return (
        f"{row['game']} seat {row['seat']}: blunders {row['blunders']}/{row['positions']}, "
        f"loses to perfect play {row['adversary_loss']:.2f}"
    )


def eval_words(r: dict) -> str:
    """An evaluation row's headline (`evaluation.metrics.summary`): the non-losing rate and its CI, or
    in a ranked game (more than two players, a social dilemma) the mean return with its CI, the mean
    finishing rank and, on the repeated dilemmas, the cooperation (contribution) rate."""
    if r.get("non_losing") is not None:
        return f"non-losing {r['non_losing']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
    lo, hi = r["return_ci"]
    words = f"mean return {r['mean_return']:.3g} [{lo:.3g}, {hi:.3g}]"
    if r.get("rank") is not None:
        words += f", rank {r['rank']:.2f}"
    if r.get("cooperation") is not None:
        words += f", cooperation {r['cooperation']:.2f}"
    return words


def step_line(step: int, m: dict, ev: list[dict]) -> str:
    """A step's console line: its metrics `m` (none before the first step) and evaluation rows."""
    if not m:
        parts = [f"step {step:>4}", "before training"]
    else:
        parts = [f"step {step:>4}", *metric_parts(m)]
    for r in ev:
        if r.get("kind") == "exploitability":
            parts.append(f"| {r['game']} {exploitability_words(r)}")
            continue
        if r.get("kind") == "perfect_play":
            parts.append(f"| {perfect_play_words(r)}")
            continue
        held = " (held out)" if r.get("split") == "held_out" else ""
        parts.append(f"| eval {r['game']}{held} vs {r['opponent']}: {eval_words(r)}")
    if ev and ev[0].get("selection_score", -1) >= 0:
        parts.append(f"| selection {ev[0]['selection_score']:.3f}")
    return "  ".join(parts)


def metric_parts(m: dict) -> list[str]:
    """A step's metrics in words: a full-width step's gaps and fit, else the match step's figures."""
    if any(
        k.endswith("target_kl") for k in m
    ):  # a full-width step (training.full_width): no matches
        gaps = [k for k in m if k.endswith("exploitability")] or [
            k for k in m if k.endswith("nash_conv")
        ]
        named = ("target_kl", "fit_kl")
        parts = [f"{k.replace('/', ' ')} {m[k]:.4f}" for k in gaps]
        parts += [f"{k.replace('/', ' ')} {m[k]:.0f}" for k in m if k.endswith("blunders")]
        parts += [f"{k.replace('/', ' ')} {m[k]:.4f}" for k in m if k.endswith(named)]
        return parts + [f"lr {m['lr']:.2e}", f"{m['step_seconds']:.1f}s"]
    parts = [f"reward {m['reward']:+.3f}"]
    if "win_rate" in m:
        parts.append(f"win {m['win_rate']:.2f}")
    parts += [
        f"invalid {m['invalid_rate']:.2f}",
        f"len {m['response_length']:.1f}",
        f"kl {m.get('approx_kl_behaviour', 0):.4f}",
    ]
    if "kl_ref" in m:  # trained with a KL to the reference (learner.loss.kl_coef > 0)
        parts.append(f"kl_ref {m['kl_ref']:.4f}")
    parts += [
        f"ent {m.get('entropy', float('nan')):.3f}",
        f"clip {m.get('clip_frac', 0):.3f}",
        f"tok/s {m['rollout_tokens_per_s']:.0f}/{m['learn_tokens_per_s']:.0f}",
        f"{m['step_seconds']:.1f}s",
    ]
    return parts
