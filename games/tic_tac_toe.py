"""Tic-tac-toe on OpenSpiel's rules (`pyspiel` game `tic_tac_toe`).

Rules      Two players take turns marking cells of a 3x3 grid; player_0 plays X and
           moves first, player_1 plays O. Three of your marks in a row, column or
           diagonal wins; a full board without a line is a draw.
Moves      the cell number 0-8, row by row (0 top-left, 8 bottom-right); the action id
           is that number (OpenSpiel's). Only empty cells are legal.
Observation  OpenSpiel's observation tensor (27 floats: empty/O/X planes) and an action
           mask of 9.
Rewards    +1 win, -1 loss, 0 draw at the end; an illegal action: -1 to the offender,
           0 to the other, game over.
Text       the board with empty cells shown by their number, e.g.
                X | 1 | 2
               ---+---+---
                3 | O | 5
               ---+---+---
                6 | 7 | X
           or, with `board="line"`, one token per cell in reading order, '.' for empty:
               Board: X . . . O . . . X
           (fixed length and fixed positions, for a tiny model learning from scratch;
           pair it with the LLM agent's `prompt="state"`), or, with `board="relative"`,
           the same line from the reader's side: Y your marks, T theirs,
               Board: T . . . Y . . . T          (O's view of the board above)
           so a pattern learnt in one seat (complete your line, block theirs) reads the
           same in the other; or, with `board="numbered"`, the relative board with each
           empty cell shown by its number, one token per cell between '|' separators:
               Board: |T|1|2|3|Y|5|6|7|T|
           so a legal move is a token of the prompt itself (the number tokens are the
           move tokens) and every cell sits at a fixed distance from its neighbours.
Symmetry   the board's eight symmetries (`SYMMETRIES`: rotations and reflections) map
           positions to positions of equal value; `symmetric_text` carries a prompt and a
           move through one of them, for training on every orientation of a turn
           (`games[i].symmetries`, `training.symmetry`).
"""

from __future__ import annotations

import re

from games.openspiel_env import OpenSpielEnv

MARKS = ("X", "O")
BOARDS = ("grid", "line", "relative", "numbered")
RELATIVE = ("Y", "T")  # board="relative": the reader's marks, the opponent's


RULES = tuple(  # per seat: the rules as that player is told them
    "Tic-tac-toe on a 3x3 board. Players take turns placing their mark in an empty cell; "
    "X moves first. Three of your marks in a row, column or diagonal wins (+1); the loser gets -1; "
    "a full board with no line is a draw (0).\n"
    f"You play {MARKS[me]} ({'first' if me == 0 else 'second'}); your opponent plays {MARKS[1 - me]}.\n"
    "Cells are numbered 0-8 row by row: 0 1 2 / 3 4 5 / 6 7 8. A move is the number of an empty cell."
    for me in (0, 1)
)


CELLS = tuple(str(i) for i in range(9))
_GRID_TEMPLATE = "\n---+---+---\n".join([" {} | {} | {}"] * 3)
# per reader, per player: the history line's prefix and the state's last line
_WHO = tuple(
    tuple(f"{'you' if p == me else 'opponent'} ({MARKS[p]}): " for p in (0, 1)) for me in (0, 1)
)
_TO_MOVE = tuple(
    tuple(f"\n{MARKS[p]} to move" + (" (you)." if p == me else ".") for p in (0, 1))
    for me in (0, 1)
)


def board_text(cells: list[str]) -> str:
    """Render 9 cell strings ('X', 'O' or the cell number) as a grid."""
    return _GRID_TEMPLATE.format(*cells)


class TicTacToe(OpenSpielEnv):
    metadata = {
        "render_modes": ["human", "ansi"],
        "name": "tic_tac_toe",
        "is_parallelizable": False,
    }
    static_move_text = True  # the cell number

    def __init__(
        self, render_mode: str | None = None, illegal_reward: float = -1.0, board: str = "grid"
    ):
        if board not in BOARDS:
            raise ValueError(f"tic_tac_toe board must be one of {', '.join(BOARDS)}, got {board!r}")
        self.board = board
        super().__init__("tic_tac_toe", render_mode=render_mode, illegal_reward=illegal_reward)

    def _cells(self) -> list[str]:
        cells = list(CELLS)
        for player, action in self.moves:
            cells[action] = MARKS[player]
        return cells

    def rules_text(self, agent: str) -> str:
        return RULES[self._index[agent]]

    def state_text(self, agent: str) -> str:
        cells = self._cells()
        if self.board == "grid":
            text = board_text(cells)
        elif self.board == "line":
            text = "Board: " + " ".join(c if c in MARKS else "." for c in cells)
        elif self.board == "relative":
            mine = MARKS[self._index[agent]]
            text = "Board: " + " ".join(RELATIVE[c != mine] if c in MARKS else "." for c in cells)
        elif self.board == "numbered":
            mine = MARKS[self._index[agent]]
            text = (
                "Board: |" + "|".join(RELATIVE[c != mine] if c in MARKS else c for c in cells) + "|"
            )
        to_move = self._current  # the state's current player (negative once it is over)
        if to_move < 0:
            r = self.state.returns()[self._index[agent]]
            return text + "\n" + ("You won." if r > 0 else "You lost." if r < 0 else "Draw.")
        return text + _TO_MOVE[self._index[agent]][to_move]

    def move_text(self, agent: str, action: int) -> str:
        return str(int(action))

    def history_text(self, agent: str) -> list[str]:
        who = _WHO[self._index[agent]]
        return [who[p] + CELLS[a] for p, a in self.moves]


def _symmetries() -> list[tuple[int, ...]]:
    """The 8 cell maps of the square: `to[c]` is where cell c lands. Identity first."""
    rotate = lambda r, c: (c, 2 - r)  # noqa: E731  a quarter turn clockwise
    out = []
    for mirror in (False, True):
        for turns in range(4):
            to = []
            for cell in range(9):
                r, c = divmod(cell, 3)
                if mirror:
                    c = 2 - c
                for _ in range(turns):
                    r, c = rotate(r, c)
                to.append(r * 3 + c)
            out.append(tuple(to))
    return out


SYMMETRIES: list[tuple[int, ...]] = _symmetries()
_LINE = re.compile(r"Board: ((?:\S ){8}\S)")  # board="line" / "relative"
_NUMBERED = re.compile(r"Board: \|((?:[^|\n]\|){9})")
_GRID = re.compile(
    r" (\S) \| (\S) \| (\S)\n---\+---\+---\n (\S) \| (\S) \| (\S)\n---\+---\+---\n (\S) \| (\S) \| (\S)"
)
_CELL_REF = re.compile(
    r"(\[|\((?:X|O)\): )([0-8])\b"
)  # "[4]" in LEGAL MOVES, "you (X): 4" in the history


def _moved(cells: list[str], to: tuple[int, ...]) -> list[str]:
    """Cells carried through the map; an empty cell shown by its number gets its new number."""
    out = [""] * 9
    for c, mark in enumerate(cells):
        out[to[c]] = str(to[c]) if mark.isdigit() else mark
    return out


def symmetric_text(text: str, to: tuple[int, ...]) -> str:
    """`text` (a prompt: board in any of the four renderings, legal moves, history) with every cell carried by `to`."""
    text = _LINE.sub(lambda m: "Board: " + " ".join(_moved(m.group(1).split(" "), to)), text)
    text = _NUMBERED.sub(
        lambda m: "Board: |" + "|".join(_moved(m.group(1).split("|")[:9], to)) + "|", text
    )
    text = _GRID.sub(lambda m: board_text(_moved(list(m.groups()), to)), text)
    return _CELL_REF.sub(lambda m: m.group(1) + str(to[int(m.group(2))]), text)


def symmetric_move(move: str, to: tuple[int, ...]) -> str:
    return str(to[int(move)])


def env(**kwargs) -> TicTacToe:
    return TicTacToe(**kwargs)
