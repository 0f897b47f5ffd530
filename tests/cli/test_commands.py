"""The `arena` command table: every command is a module with add_arguments and run, and the
flags several commands share are defined once (cli/flags.py)."""

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import cli
from cli.main import COMMANDS, build_parser

CLI_DIR = Path(cli.__file__).parent


def test_every_command_has_add_arguments_and_run():
    for name, command in COMMANDS.items():
        for attr in ("add_arguments", "run"):
            assert callable(getattr(command.module, attr, None)), f"{name}: no {attr}"
        assert list(inspect.signature(command.module.run).parameters) == ["args"], name
        assert command.help, name
    assert sorted(COMMANDS) == sorted(build_parser()._subparsers._group_actions[0].choices)


def _flag_definitions(flag: str) -> list[str]:
    """Where in cli/ an add_argument call defines `flag`."""
    found = []
    for path in sorted(CLI_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "add_argument"
                and any(isinstance(a, ast.Constant) and a.value == flag for a in node.args)
            ):
                found.append(f"{path.relative_to(CLI_DIR)}:{node.lineno}")
    return found


def test_shared_flags_are_defined_once():
    for flag in ("--threads", "--overwrite", "--ray-workers", "--ray-cpus", "--ray-gpus"):
        assert len(_flag_definitions(flag)) == 1, (flag, _flag_definitions(flag))
    parser = build_parser()
    for argv in (["play", "g", "--agents", "a"], ["eval"], ["tournament", "c"], ["serve", "m"]):
        assert parser.parse_args(argv).threads == 0, argv
    assert parser.parse_args(["train", "c"]).threads is None  # the config's threads stand


def test_help_imports_no_command_code():
    """`arena --help` builds every command's parser without loading torch, the games or the store."""
    code = (
        "import sys; from cli.main import build_parser; build_parser().format_help(); "
        "heavy = [m for m in ('torch', 'games', 'tournaments.store', 'training', 'evaluation', 'ray') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
