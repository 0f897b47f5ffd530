"""Live progress: turns and generated tokens reach the display as they are played, before any
match ends; a log that is not a terminal gets a bounded number of plain lines."""

import io

from agents import make_agent
from arena.cli import main as arena_main
from arena.progress import Progress
from arena.runner import plan_matches, play


class Recorder:
    """A progress hook that keeps every event in order."""

    def __init__(self):
        self.events = []

    def turns(self, n, tokens):
        self.events.append(("turns", n, tokens))

    def update(self, n):
        self.events.append(("match", n, 0))


def _until_first_match(events):
    return events[: next(i for i, e in enumerate(events) if e[0] == "match")]


def test_turn_events_arrive_before_the_first_match_ends():
    specs = ["random", "mcts:10"]
    hook = Recorder()
    records = list(play(plan_matches("tic_tac_toe", specs, 3), {s: make_agent(s) for s in specs}, concurrency=3, progress=hook))
    before = _until_first_match(hook.events)
    assert sum(n for _, n, _ in before) >= 5  # a tic-tac-toe match takes at least 5 moves
    assert sum(n for kind, n, _ in hook.events if kind == "turns") == sum(len(r.turns) for r in records)
    assert sum(n for kind, n, _ in hook.events if kind == "match") == 3


def test_an_llm_agent_reports_its_generated_tokens_per_batch_mid_match():
    spec = "llm:tiny-llama,max_new_tokens=3,fallback=random,max_retries=0"
    agents = {"tiny": make_agent(spec, "tiny"), "random": make_agent("random")}
    hook = Recorder()
    records = list(play(plan_matches("tic_tac_toe", ["tiny", "random"], 4), agents, concurrency=4, progress=hook))
    before = _until_first_match(hook.events)
    assert any(tokens > 0 for _, _, tokens in before)
    assert sum(tokens for _, _, tokens in hook.events) == sum(r.completion_tokens for r in records)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_not_a_terminal_prints_a_bounded_number_of_lines():
    clock, out = FakeClock(), io.StringIO()
    with Progress(total=36, desc="quickstart", file=out, tty=False, interval=30, clock=clock) as bar:
        for i in range(10_000):  # 10,000 batched calls over 300 s, a match ending every 278 calls
            clock.now = i * 0.03
            bar.turns(16, 160)
            if i % 278 == 277:
                bar.update(1)
    lines = out.getvalue().splitlines()
    assert 300 / 30 <= len(lines) <= 300 / 30 + 1
    assert lines[0].startswith("quickstart: 3/36 matches, 16016 turns, 160160 tokens (5338.7 tok/s), 0:30")
    assert lines[-1].startswith("quickstart: 35/36 matches, 160000 turns, 1600000 tokens (5333.9 tok/s), 4:59")


def test_short_runs_off_a_terminal_print_one_line_and_transient_ones_none():
    out = io.StringIO()
    with Progress(total=2, desc="g", file=out, tty=False) as bar:
        bar.turns(3, 0)
        bar.update(2)
    assert out.getvalue() == "g: 2/2 matches, 3 turns, 0:00\n"
    quiet = io.StringIO()
    with Progress(total=2, file=quiet, tty=False, leave=False) as bar:
        bar.turns(3, 9)
    assert quiet.getvalue() == ""


def test_on_a_terminal_the_bar_shows_turns_and_tokens_before_a_match_ends():
    clock, out = FakeClock(), io.StringIO()
    bar = Progress(total=36, desc="quickstart", file=out, tty=True, clock=clock)
    clock.now = 2.0
    bar.turns(16, 200)
    assert "0/36" in out.getvalue().split("\r")[-1] and "16 turns, 200 tokens (100.0 tok/s)" in out.getvalue().split("\r")[-1]
    clock.now = 2.1  # within 0.2 s of the last refresh: the postfix waits for the next one
    bar.turns(16, 200)
    assert "32 turns" not in out.getvalue()
    clock.now = 2.5
    bar.turns(1, 0)
    assert "33 turns, 400 tokens" in out.getvalue().split("\r")[-1]
    bar.close()


def test_arena_play_off_a_terminal_ends_with_one_progress_line(capsys):
    assert arena_main(["play", "tic_tac_toe", "--agents", "random", "mcts:10", "--matches", "4"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tic_tac_toe: 4/4 matches, ") and " turns, " in err[0]


def test_training_rollouts_and_evaluations_show_their_turns_as_they_happen(tmp_path, monkeypatch, capsys):
    import functools

    from rich.console import Console

    from training import selfplay

    monkeypatch.setattr(selfplay, "Progress", functools.partial(Progress, interval=0))  # a line per event
    cfg = selfplay.parse_config({
        "model": "tiny-llama", "seed": 3, "steps": 1, "games": ["tic_tac_toe"], "matches_per_step": 4, "concurrency": 4,
        "agent": {"prompt": "compact", "constrained": True, "max_new_tokens": 4, "max_retries": 0},
        "league": {"self_play": 0.5, "bots": ["random"]}, "eval": {"every": 1, "games": 2, "opponents": ["random"]},
        "run_dir": str(tmp_path / "run")})
    selfplay.train(cfg, console=Console(quiet=True))
    err = capsys.readouterr().err.splitlines()
    rollout = [line for line in err if line.startswith("step 1 rollout: ")]
    assert rollout[0].startswith("step 1 rollout: 0/4 matches, ") and " tokens (" in rollout[0]
    assert any(line.startswith("eval step 0 (report): 0/2 matches, ") for line in err)
    assert any(line.startswith("eval step 1 (report): 0/2 matches, ") for line in err)


def test_the_console_prints_bot_names_as_written():
    """rich's emoji codes would print the opponent `mcts:100` as `mcts💯` (seen in a training log)."""
    from arena.console import make_console

    console = make_console(120, record=True, file=io.StringIO())
    console.print("eval connect_four vs mcts:100: non-losing 0.00 | cfr:thumbs_up:")
    text = console.export_text()
    assert "vs mcts:100: non-losing" in text and "cfr:thumbs_up:" in text
