"""P(cooperate) by memory-1 state and round, from the match log of a reciprocity study's evaluation.

    python -m experiments.reciprocity.by_round runs/reciprocity/advantage_alignment_s0/eval_step250/eval.jsonl

The memory-1 profile (`evaluation.social.memory1_profile`) pools every round of a state; a
policy whose prompt shows the round number can still treat one round apart (defect after
mutual cooperation in round 3 only), which the pooled profile hides and this table shows.
Per opponent, per state (`first`, then the last round's moves, own first: CC, CD, DC, DD),
per round: the mean over the visits of the agent's own probability of cooperating there
(`TurnRecord.action_probs`, exact for a constrained policy) and the number of visits.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from evaluation.run import AGENT

STATES = ("first", "CC", "CD", "DC", "DD")


def by_round(jsonl: Path) -> dict[tuple[str, str, int], list[float]]:
    """(opponent, state, round) -> the agent's P(cooperate) at each visit (2x2 games: move 0
    cooperates). Rounds count from 1; `self` is the agent against itself."""
    out: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for line in jsonl.read_text().splitlines():
        match = json.loads(line)
        others = [a for a in match["seats"].values() if a != AGENT]
        opponent = others[0] if others else "self"
        moves: dict[str, list[int]] = defaultdict(list)
        turns = match["turns"]
        for start in range(0, len(turns), 2):  # a round: one turn per seat
            pair = turns[start : start + 2]
            for turn in pair:
                if turn["agent"] != AGENT or not turn.get("action_probs"):
                    continue
                other = next(u for u in pair if u is not turn)
                mine, theirs = moves[turn["player"]], moves[other["player"]]
                state = (
                    "first" if not mine else "CD"[mine[-1] != 0] + "CD"[theirs[-1] != 0]
                )  # action 0 = cooperate
                out[(opponent, state, start // 2 + 1)].append(
                    dict(turn["action_probs"]).get(0, 0.0)
                )
            for turn in pair:
                moves[turn["player"]].append(turn["action"])
    return out


def table(data: dict[tuple[str, str, int], list[float]]) -> str:
    """One block per opponent: a row per state, a column per round, `p (visits)`."""
    rounds = max((r for _, _, r in data), default=0)
    lines = []
    for opponent in sorted({o for o, _, _ in data}):
        lines.append(f"{opponent}: P(C) (visits) by round 1..{rounds}")
        for state in STATES:
            cells = []
            for r in range(1, rounds + 1):
                v = data.get((opponent, state, r))
                cells.append(f"{sum(v) / len(v):.2f} ({len(v)})" if v else "-")
            lines.append(f"  {state:5s} " + "  ".join(f"{c:>10s}" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "jsonl", type=Path, help="an evaluation's eval.jsonl (the study's RUN/eval_stepN/)"
    )
    args = p.parse_args(argv)
    if not args.jsonl.is_file():
        p.error(f"{args.jsonl} is not a file")
    print(table(by_round(args.jsonl)))


if __name__ == "__main__":
    main()
