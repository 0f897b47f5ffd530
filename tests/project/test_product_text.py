"""Product files describe the product, not how it was built.

Every tracked file (`git ls-files`) is scanned for development-history words: a work
session's number, this project's issue numbers, "the lead", "this VM". History belongs in
commit messages. An issue number of another project is fine when its name comes first
("open_spiel issue #155", "vllm-project/vllm issue 1234").
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()  # quotes the words it looks for

RULES = {
    "a work session's number": re.compile(r"\bsessions?[\s-]+\d+", re.IGNORECASE),
    "the lead": re.compile(r"\bthe lead\b", re.IGNORECASE),
    "this VM": re.compile(r"\bthis VM\b", re.IGNORECASE),
}
ISSUE = re.compile(r"(?P<before>[\w./-]*)(?P<space>\s*)\bissues?[\s-]*#?\d+", re.IGNORECASE)
# Other projects whose issue numbers a file may cite (the word just before "issue").
OTHER_PROJECTS = {
    "accelerate", "cleanrl", "gymnasium", "huggingface", "matplotlib", "mkdocs", "networkx",
    "numpy", "open_spiel", "openai", "openskill", "openspiel", "peft", "pettingzoo", "pytest",
    "pytorch", "ray", "ruff", "safetensors", "scipy", "tensorboard", "textarena", "torch",
    "transformers", "vllm",
}  # fmt: skip


def other_project(name: str) -> bool:
    """True when `name` (the token before "issue") names another project: `owner/repo` or a known name."""
    name = name.strip("./-").lower()
    return "/" in name or name in OTHER_PROJECTS


def violations(path: str, text: str) -> list[str]:
    """Every development-history phrase in `text`, as 'path:line: phrase (rule)'."""
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for rule, pattern in RULES.items():
            for m in pattern.finditer(line):
                found.append(f"{path}:{lineno}: {m.group(0)!r} ({rule})")
        for m in ISSUE.finditer(line):
            if not (m.group("space") and other_project(m.group("before"))):
                found.append(
                    f"{path}:{lineno}: {m.group(0).strip()!r} (this project's issue number)"
                )
    return found


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [p for p in out.split("\0") if p and p != THIS]


def test_no_development_history_in_tracked_files():
    found = []
    for path in tracked_files():
        try:
            data = (ROOT / path).read_bytes()
        except OSError:  # listed but absent (a sparse or partial checkout)
            continue
        if b"\0" in data[:8192]:
            continue  # binary (figures)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        found += violations(path, text)
    shown = "\n".join(found[:50]) + (f"\n... and {len(found) - 50} more" if len(found) > 50 else "")
    assert not found, (
        f"{len(found)} development-history phrase(s) in tracked files; describe the product "
        f"(history goes in commit messages):\n{shown}"
    )


@pytest.mark.parametrize(
    "line, bad",
    [
        ("measured in session 19", True),
        ("the session-19 config", True),
        ("sessions 19-20", True),
        ("the issue-18 ceilings", True),
        ("Session 23 closing note", True),
        ("the target (issue 19) is 1.2x", True),
        ("see issue #43", True),
        ("(issue 21): at most 90 minutes", True),
        ("the lead's two runs", True),
        ("on this VM at load 2", True),
        ("open_spiel issue #155 explains it", False),
        ("vllm-project/vllm issue 1234", False),
        ("the leaderboard's points", False),
        ("an HTTP session object", False),
        ("a 2-core AMD EPYC with AVX-512 BF16", False),
    ],
)
def test_rules(line, bad):
    assert bool(violations("x.md", line)) is bad
