"""Ctrl-C for a child process the test starts: SIGINT is reset to its default in the child, so
Python raises KeyboardInterrupt there even where the test run itself ignores SIGINT (started in
the background by a non-interactive shell, or under nohup, whose children inherit the ignore)."""

import signal


def default_sigint() -> None:
    """`preexec_fn` for `subprocess.Popen`: the child takes SIGINT as a Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
