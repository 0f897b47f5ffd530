"""The docs site's generated reference pages (docs/hooks/reference.py) have what they need.

Every field of a config dataclass carries its own docstring (a string literal on the line
after the field), which the configuration page shows; a field without one would be an
empty cell there. Each tournament format's options are described by the Args section of its
function's docstring (Google style), which the page's format_options table shows.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("griffe", reason="the docs extra (pip install -e '.[docs]') reads field docs")

ROOT = Path(__file__).resolve().parents[2]


def _hook():
    spec = importlib.util.spec_from_file_location(
        "docs_reference", ROOT / "docs/hooks/reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_config_field_is_documented():
    hook = _hook()
    missing = [
        f"{cls.__module__}.{cls.__name__}.{name}"
        for cls in hook.config_classes()
        for name, (_, doc) in hook.field_docs(cls).items()
        if not doc.strip()
    ]
    assert not missing, "config fields without a docstring: " + ", ".join(missing)


def test_reference_pages_are_generated():
    hook = _hook()
    cli = hook.cli_page()
    for command in ("games", "play", "serve", "tournament", "eval", "train", "plot", "export"):
        assert f"## arena {command}\n" in cli
    for command in ("export model", "export trajectories", "export openspiel", "import openspiel"):
        assert f"### arena {command}\n" in cli  # nested subcommands get their own tables
    assert "`--dtype DTYPE`" in cli.split("### arena export model")[1].split("###")[0]
    dataset = hook.dataset_page()
    assert "| `is_truncated` | `bool` |" in dataset and "| `winner` | `string` |" in dataset
    config = hook.config_page()
    assert "`learner.loss.kl_coef`" in config and "`rating.ci`" in config


def test_every_format_option_is_documented():
    """Each tournament format's keyword arguments have an Args line (the format_options table)."""
    rows = _hook()._format_rows()
    missing = [row[0] for row in rows if not row[0].startswith("**") and not row[2].strip()]
    assert not missing, "format options without an Args line: " + ", ".join(missing)
