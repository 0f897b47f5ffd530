"""Perfect play, checked by walking the tree: every position an agent's policy can reach
against any opponent, the moves there that lower the game-theoretic value, and the result
a perfect adversary forces against it.

    table = PolicyTable(agent, "tic_tac_toe", {"board": "relative"})
    row = perfect_play(table, seat=1)   # row.positions, row.blunders, row.adversary_return

Where `evaluation.exact_vs_random` weighs the lines by a random opponent's choices, this
walk lets the opponent make every legal move: the agent's positions are all those its
policy reaches against some opponent (with a greedy policy, its one move at each; with a
stochastic one, every move of positive probability). A move there is a blunder when its
value, by the full-depth solver of `evaluation.blunders`, is below the best move's.

The adversary is a best response to the agent's policy: at its own turns it picks the
move that minimises the agent's expected return, knowing the agent's distributions
(`adversary_return`, -1 .. 1 in tic-tac-toe; `adversary_loss`: the probability the agent
loses under that adversary). A policy that never blunders keeps the start's value (a draw
in tic-tac-toe) whatever the opponent does, so it never loses to the adversary; the
converse does not hold (a missed win is a blunder that does not lose).

Games: two-player zero-sum deterministic perfect-information games the solver can search
to the end (`evaluation.blunders.solvable`: tic-tac-toe, short `openspiel:` games).

`python -m evaluation.perfect_play SPEC [SPEC ...]` prints both seats for agent specs
(e.g. `llm:runs/tictactoe_tiny/best`; greedy unless `--temperature`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from evaluation.blunders import judge, solvable
from evaluation.exact_vs_random import PolicyTable, policy_tables, table_parser


@dataclass
class PerfectPlayRow:
    """One seat's tree walk (`perfect_play`)."""

    agent: str
    game: str
    seat: int  # the agent's seat (0 moves first)
    positions: int  # agent decision positions reachable against some opponent
    blunders: int  # of those, positions where a move of positive probability lowers the value
    blunder_mass: float  # sum over those positions of the probability put on blundering moves
    adversary_return: float  # the agent's expected return against a best-responding adversary
    adversary_loss: float  # P(the agent loses) against that adversary
    examples: list[str] = field(default_factory=list)  # a few blunder positions, "board | move"
    kind: str = "perfect_play"

    @property
    def perfect(self) -> bool:
        """No value-losing move anywhere the policy reaches."""
        return self.blunders == 0


def reachable(table: PolicyTable, seat: int) -> dict[tuple, object]:
    """Every decision position of the agent in `seat` that its policy reaches against some
    opponent, keyed by `table.key` (the walk asks the agent once per level, batched).

    Args:
        table: the agent's move distributions (filled as the walk goes).
        seat: the agent's seat.

    Returns:
        position key -> pyspiel state.
    """
    frontier = {table.key(s := table.game.new_initial_state()): s}
    found: dict[tuple, object] = {}
    while frontier:
        table.fill([s for s in frontier.values() if s.current_player() == seat])
        nxt: dict[tuple, object] = {}
        for key, state in frontier.items():
            if state.current_player() == seat:
                found[key] = state
                moves = [a for a, q in table(state).items() if q > 0]
            else:
                moves = state.legal_actions()
            for a in moves:
                child = state.child(a)
                if not child.is_terminal():
                    nxt.setdefault(table.key(child), child)
        frontier = nxt
    return found


def adversary_value(table: PolicyTable, seat: int, state, memo: dict) -> tuple[float, float]:
    """(expected return, P(loss)) of the agent in `seat` from `state` against a best response:
    at its own turns the agent plays `table`'s distribution (filled for every position its
    policy reaches from `state`, e.g. by `reachable`), at the other's the adversary takes the
    lowest return, then the likeliest loss.

    Args:
        table: the agent's move distributions.
        seat: the agent's seat.
        state: a pyspiel state.
        memo: position key -> value, shared between calls on the same table.

    Returns:
        The agent's expected return and its probability of losing.
    """
    if state.is_terminal():
        r = state.returns()[seat]
        return r, float(r < 0)
    key = table.key(state)
    if key in memo:
        return memo[key]
    if state.current_player() == seat:
        ret = loss = 0.0
        for a, q in table(state).items():
            if q > 0:
                r, lo = adversary_value(table, seat, state.child(a), memo)
                ret, loss = ret + q * r, loss + q * lo
        out = (ret, loss)
    else:  # the adversary: lowest return for the agent, then the likeliest loss
        out = min(
            (adversary_value(table, seat, state.child(a), memo) for a in state.legal_actions()),
            key=lambda v: (v[0], -v[1]),
        )
    memo[key] = out
    return out


def perfect_play(table: PolicyTable, seat: int, examples: int = 5) -> PerfectPlayRow:
    """Blunders over every position the agent's policy reaches, and its result against a
    perfect adversary, for the agent in `seat`.

    Args:
        table: the agent's move distributions on a game `evaluation.blunders.solvable` accepts.
        seat: the agent's seat (0 moves first).
        examples: how many blunder positions to keep as text.

    Returns:
        The seat's row.

    Raises:
        ValueError: the game cannot be searched to the end by the solver.
    """
    if not solvable(table.game_name, table.params):
        raise ValueError(
            f"perfect play needs a game the solver searches to the end; {table.game_name} is not one"
        )
    positions = reachable(table, seat)
    blunders, mass, shown = 0, 0.0, []
    for state in positions.values():
        bad = {a: q for a, q in table(state).items() if q > 0 and judge(state, a) is not None}
        if bad:
            blunders += 1
            mass += sum(bad.values())
            if len(shown) < examples:
                board = str(state).replace("\n", "/")
                shown.append(f"{board} | {','.join(map(str, sorted(bad)))}")
    ret, loss = adversary_value(table, seat, table.game.new_initial_state(), {})
    name = getattr(table.agent, "name", "agent")
    return PerfectPlayRow(
        name, table.game_name, seat, len(positions), blunders, mass, ret, loss, shown
    )


def main(argv: list[str] | None = None) -> None:
    ap = table_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="", help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    rows = []
    print(
        f"{'agent':<44} {'seat':>4} {'positions':>9} {'blunders':>8} {'adv. return':>11} {'P(loss)':>8}"
    )
    for spec, table in policy_tables(args):
        for seat in (0, 1):
            row = perfect_play(table, seat)
            row.agent = spec
            rows.append(row)
            print(
                f"{spec:<44} {seat:>4} {row.positions:>9} {row.blunders:>8} "
                f"{row.adversary_return:>11.3f} {row.adversary_loss:>8.3f}"
            )
            for ex in row.examples:
                print(f"    blunder: {ex}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=1)


if __name__ == "__main__":
    main()
