"""Connect Four on OpenSpiel's rules (`pyspiel` game `connect_four`).

Rules      Two players take turns dropping a disc into one of 7 columns of a 6-row grid;
           the disc falls to the lowest empty cell of that column. player_0 plays X and
           moves first, player_1 plays O. Four of your discs in a row (horizontally,
           vertically or diagonally) wins; a full grid without four in a row is a draw.
Moves      the column number 0-6, left to right; the action id is that number
           (OpenSpiel's). Only columns that are not full are legal.
Observation  OpenSpiel's observation tensor (126 floats: one-hot cell contents, 3 planes of
           6x7) and an action mask of 7.
Rewards    +1 win, -1 loss, 0 draw at the end; an illegal action: -1 to the offender,
           0 to the other, game over.
Text       the grid, top row first, `.` for empty, with column numbers underneath, e.g.
               . . . . . . .
               . . . . . . .
               . . . . . . .
               . . . X . . .
               . . O X . . .
               . O X X O . .
               0 1 2 3 4 5 6
"""

from __future__ import annotations

from games.openspiel_env import OpenSpielEnv

MARKS = ("X", "O")


class ConnectFour(OpenSpielEnv):
    metadata = {
        "render_modes": ["human", "ansi"],
        "name": "connect_four",
        "is_parallelizable": False,
    }

    static_move_text = True  # the column number

    def __init__(self, render_mode: str | None = None, illegal_reward: float = -1.0):
        super().__init__("connect_four", render_mode=render_mode, illegal_reward=illegal_reward)
        self.rows, self.columns = (
            self.game.get_parameters()["rows"],
            self.game.get_parameters()["columns"],
        )

    def board_text(self) -> str:
        grid = [["."] * self.columns for _ in range(self.rows)]
        height = [0] * self.columns
        for player, column in self.moves:
            grid[self.rows - 1 - height[column]][column] = MARKS[player]
            height[column] += 1
        lines = [" ".join(row) for row in grid]
        return "\n".join(lines + [" ".join(str(c) for c in range(self.columns))])

    def rules_text(self, agent: str) -> str:
        me = self._index[agent]
        return (
            f"Connect Four on a grid of {self.rows} rows and {self.columns} columns. Players take turns dropping "
            "one disc into a column; it falls to the lowest empty cell of that column. X moves first. "
            "Four of your discs in a line (horizontal, vertical or diagonal) wins (+1); the loser gets -1; "
            "a full grid with no line of four is a draw (0).\n"
            f"You play {MARKS[me]} ({'first' if me == 0 else 'second'}); your opponent plays {MARKS[1 - me]}.\n"
            f"Columns are numbered 0-{self.columns - 1} from left to right. A move is the number of a column "
            "that is not full."
        )

    def state_text(self, agent: str) -> str:
        text = self.board_text()
        if self.state.is_terminal():
            r = self.state.returns()[self._index[agent]]
            return text + "\n" + ("You won." if r > 0 else "You lost." if r < 0 else "Draw.")
        to_move = self.state.current_player()
        return (
            text
            + f"\n{MARKS[to_move]} to move"
            + (" (you)." if to_move == self._index[agent] else ".")
        )

    def move_text(self, agent: str, action: int) -> str:
        return str(int(action))

    def history_text(self, agent: str) -> list[str]:
        me = self._index[agent]
        return [
            f"{'you' if p == me else 'opponent'} ({MARKS[p]}): column {a}" for p, a in self.moves
        ]


def env(**kwargs) -> ConnectFour:
    return ConnectFour(**kwargs)
