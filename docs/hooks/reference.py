"""The docs site's reference pages, generated from the code at build time (a mkdocs hook).

    reference/cli.md     the `arena` command, from its argparse parser (`cli.main.build_parser`)
    reference/config.md  every config key, from the config dataclasses' field docstrings
                         (read by griffe), the rules next to the fields (`core.typed_config.option`), and the
                         tournament formats' signatures
    reference/games.md   the game catalogue, from each game module's docstring (PettingZoo's
                         pattern) and `games.CATALOGUE`
    reference/dataset.md the columns of `arena export trajectories`, from `arena.dataset`

Nothing generated is committed. A config field documents itself with a string literal on
the line after it (an attribute docstring, as in `training/config.py`); `tests/project/test_docs_reference.py`
fails when a field has none. `python docs/hooks/reference.py OUT_DIR` writes the pages to
a folder, to read them without building the site.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


# --- markdown helpers ---------------------------------------------------------------------


def _escape(text: str) -> str:
    """Text for a markdown table cell: HTML and emphasis characters escaped outside code spans."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    out = []
    for p in parts:
        if p.startswith("`") and p.endswith("`") and len(p) > 1:
            out.append(p.replace("|", "\\|"))
        else:
            out.append(
                p.replace("&", "&amp;")
                .replace("<", "&lt;")
                .replace(">", "&gt;")
                .replace("|", "\\|")
                .replace("*", "\\*")
                .replace("_", "\\_")
                .replace("[", "\\[")
            )
    return "".join(out)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _yaml(value) -> str:
    """A default as it would be written in YAML, in a code span."""
    import yaml

    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    if isinstance(value, tuple):
        value = list(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    text = text.removesuffix("...").strip()
    return f"`{text}`"


# --- reference/cli.md ---------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _subcommand_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def _argument_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    rows = []
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        if a.option_strings:
            name = ", ".join(a.option_strings)
            if a.nargs != 0:
                metavar = a.metavar or a.dest.upper()
                name += f" {metavar}" + (" ..." if a.nargs in ("+", "*") else "")
        else:
            name = a.metavar or a.dest
        default = ""
        if (
            a.default is not None
            and a.default is not False
            and a.default not in ([], argparse.SUPPRESS)
            and a.nargs != 0
        ):
            default = f"`{a.default}`"
        help_text = a.help or ""
        if a.choices:
            help_text += ("; " if help_text else "") + "one of " + ", ".join(map(str, a.choices))
        if a.required and a.option_strings:
            help_text += " (required)"
        rows.append([f"`{name}`", default, _escape(help_text)])
    return rows


def cli_page() -> str:
    """`reference/cli.md`: every `arena` subcommand with its usage and arguments."""
    from cli.main import build_parser

    parser = build_parser()
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100)
    out = [
        "# Command line\n",
        "Generated from the argparse parser (`cli.main.build_parser`) when the site is built; "
        "`arena COMMAND --help` prints the same.\n",
        f"```text\n{parser.format_usage().strip()}\n```\n",
    ]
    _command_sections(parser, "arena", "##", out)
    return "\n".join(out)


def _command_sections(parser: argparse.ArgumentParser, prefix: str, level: str, out: list) -> None:
    """A section per subcommand of `parser`; one with subcommands of its own (`arena export
    model`) gets a subsection per subcommand instead of an argument table."""
    helps = _subcommand_help(parser)
    for name, sub in _subcommands(parser).items():
        sub.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100)
        out.append(f"{level} {prefix} {name}\n")
        if helps.get(name):
            out.append(_escape(helps[name]).rstrip(".") + ".\n")
        out.append(f"```text\n{sub.format_usage().strip()}\n```\n")
        if _subcommands(sub):
            _command_sections(sub, f"{prefix} {name}", level + "#", out)
        else:
            out.append(_table(["argument", "default", "meaning"], _argument_rows(sub)))


# --- reference/config.md ------------------------------------------------------------------

_GRIFFE_CACHE: dict = {}


def _griffe(cls: type):
    """The griffe object of class `cls`, read from its source once."""
    import griffe

    key = f"{cls.__module__}.{cls.__qualname__}"
    if key not in _GRIFFE_CACHE:
        _GRIFFE_CACHE[key] = griffe.load(key, search_paths=[str(ROOT)], resolve_aliases=False)
    return _GRIFFE_CACHE[key]


def field_docs(cls: type) -> dict[str, tuple[str, str]]:
    """{field: (annotation as written, docstring)} of a dataclass, read from its source by griffe
    (a field a base class declares, from that class).

    A field without a docstring maps to an empty string."""
    out = {}
    for f in dataclasses.fields(cls):
        owner = next(c for c in cls.__mro__ if f.name in c.__dict__.get("__annotations__", {}))
        member = _griffe(owner).members.get(f.name)
        doc = member.docstring.value if member is not None and member.docstring else ""
        annotation = str(member.annotation) if member is not None and member.annotation else ""
        out[f.name] = (annotation, inspect.cleandoc(doc))
    return out


def config_classes() -> list[type]:
    """Every dataclass whose fields the configuration page documents."""
    from agents.llm_agent import LLMAgentConfig
    from evaluation import suites
    from games.entry import GameEntry
    from tournaments import config as tournament
    from training import config as train
    from training.advantages import AdvantageConfig
    from training.learner_config import LearnerConfig
    from training.loss import LossConfig

    return [
        train.TrainConfig,
        train.TrainingGame,
        LLMAgentConfig,
        AdvantageConfig,
        LearnerConfig,
        LossConfig,
        train.LeagueConfig,
        train.LeagueTournament,
        train.PeriodicEvalConfig,
        train.RayConfig,
        tournament.TournamentConfig,
        GameEntry,
        tournament.RatingOptions,
        suites.EvalConfig,
        suites.EvalGame,
    ]


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _config_rows(
    cls: type,
    prefix: str = "",
    skip: tuple[str, ...] = (),
    required: tuple[str, ...] = (),
    notes: dict[str, str] | None = None,
) -> list[list[str]]:
    docs = field_docs(cls)
    notes = notes or {}
    rows = []
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        key = prefix + f.name
        annotation, doc = docs[f.name]
        default = _default(f)
        if f.name in required or default is dataclasses.MISSING:
            shown = "required"
        else:
            shown = _yaml(default)
        meaning = _escape(doc).rstrip(".")
        if key in notes:
            meaning += ("; " if meaning else "") + notes[key]
        rows.append([f"`{key}`", _escape(annotation), shown, meaning])
    return rows


def _train_notes() -> dict[str, str]:
    """What the config checker allows, per dotted key (the rules next to the fields, `core.typed_config`)."""
    from core.typed_config import rules
    from training.config import ROLLOUT_TEMPERATURE, SET_BY_LOOP, TrainConfig, TrainingGame

    notes = {}
    for key, (choices, must) in {**rules(TrainConfig), **rules(TrainingGame, "games[i].")}.items():
        notes[key] = ("one of " + ", ".join(f"`{c}`" for c in choices) if choices else "") + (
            _escape(f"must be {must}") if must else ""
        )
    notes["agent.temperature"] = _escape(f"must be {ROLLOUT_TEMPERATURE[1]}")
    for key in SET_BY_LOOP:
        notes[key] = "set by the training loop: leave it out"
    return notes


_HEADER = ["key", "type", "default", "meaning"]


def _train_section() -> list[str]:
    from agents.llm_agent import LLMAgentConfig
    from training.advantages import AdvantageConfig
    from training.config import (
        REQUIRED,
        LeagueConfig,
        LeagueTournament,
        PeriodicEvalConfig,
        RayConfig,
        TrainConfig,
        TrainingGame,
    )
    from training.full_width import FullWidthConfig
    from training.learner_config import LearnerConfig
    from training.loss import LossConfig

    notes = _train_notes()
    sections = ("agent", "advantage", "learner", "league", "eval", "ray", "full_width")
    out = [
        "## Training config\n",
        "`arena train CONFIG`: a YAML mapping of these keys (`training.config.TrainConfig`). "
        f"Required: {', '.join(f'`{k}`' for k in REQUIRED)}. Sections are mappings; "
        "`--set KEY=VALUE` on the command line replaces any key, dotted for sections "
        "(`--set learner.lr=1e-4`). The whole config is checked before the model loads; each "
        "error is one line naming the key.\n",
        "### Top level\n",
        _table(
            _HEADER,
            _config_rows(TrainConfig, skip=(*sections, "games"), required=REQUIRED, notes=notes),
        ),
        "### `games`\n",
        "A list; each entry is a game name or a mapping of these keys "
        "(`training.config.TrainingGame`).\n",
        _table(_HEADER, _config_rows(TrainingGame, "games[i].", notes=notes)),
    ]
    for title, cls, prefix, skip in (
        ("agent", LLMAgentConfig, "agent.", ()),
        ("advantage", AdvantageConfig, "advantage.", ()),
        ("learner", LearnerConfig, "learner.", ("loss",)),
        ("learner.loss", LossConfig, "learner.loss.", ()),
        ("league", LeagueConfig, "league.", ("tournament",)),
        ("league.tournament", LeagueTournament, "league.tournament.", ()),
        ("eval", PeriodicEvalConfig, "eval.", ()),
        ("ray", RayConfig, "ray.", ()),
        ("full_width", FullWidthConfig, "full_width.", ()),
    ):
        doc = inspect.getdoc(cls) or ""
        first = doc.split("\n\n")[0].replace("\n", " ") if doc and cls.__doc__ else ""
        out.append(f"### `{title}`\n")
        if first and not first.startswith(cls.__name__ + "("):
            out.append(_escape(first) + f" (`{cls.__module__}.{cls.__name__}`)\n")
        else:
            out.append(f"`{cls.__module__}.{cls.__name__}`\n")
        out.append(_table(_HEADER, _config_rows(cls, prefix, skip=skip, notes=notes)))
    return out


def _format_rows() -> list[list[str]]:
    import griffe

    from tournaments.formats import FORMATS, format_options

    rows = []
    for name, fn in FORMATS.items():
        params = inspect.signature(fn).parameters
        obj = griffe.load(f"{fn.__module__}.{fn.__name__}", search_paths=[str(ROOT)])
        described = {}
        if obj.docstring:
            for section in obj.docstring.parse("google", warnings=False):
                if section.kind.value == "parameters":
                    described = {p.name: p.description for p in section.value}
        summary = (inspect.getdoc(fn) or "").split("\n\n")[0].replace("\n", " ")
        rows.append([f"**`{name}`**", "", _escape(summary)])
        for opt in format_options(name):
            default = params[opt].default
            shown = "" if default is inspect.Parameter.empty else _yaml(default)
            rows.append([f"`{opt}`", shown, _escape(described.get(opt, ""))])
    return rows


def _tournament_section() -> list[str]:
    from games.entry import GameEntry
    from tournaments.config import ARENA_OPTIONS, RatingOptions, TournamentConfig

    return [
        "## Tournament config\n",
        "`arena tournament CONFIG`: a YAML mapping of these keys "
        "(`tournaments.config.TournamentConfig`). A resume must keep the config; `rating` and "
        "`arena.concurrency` may change.\n",
        "### Top level\n",
        _table(_HEADER, _config_rows(TournamentConfig, skip=("games", "rating"))),
        "### `games`\n",
        "A list; each entry is a game name or a mapping of these keys (`games.entry.GameEntry`).\n",
        _table(_HEADER, _config_rows(GameEntry, "games[i].", skip=("weight",))),
        "### `rating`\n",
        _table(_HEADER, _config_rows(RatingOptions, "rating.")),
        "### `arena`\n",
        "Options of the match runner (`tournaments.config.ARENA_OPTIONS`) and their defaults: "
        + ", ".join(f"`{k}: {v}`" for k, v in ARENA_OPTIONS.items())
        + ".\n",
        "### `format_options`\n",
        "Each format's options (the format function's keyword arguments; `games_per_pairing` "
        "fills `games` or `best_of`, `seed` fills `seed`).\n",
        _table(["format / option", "default", "meaning"], _format_rows()),
    ]


def _eval_section() -> list[str]:
    from evaluation.suites import EvalConfig, EvalGame

    return [
        "## Evaluation config\n",
        "`arena eval CONFIG`: a YAML mapping of these keys (`evaluation.suites.EvalConfig`); "
        "the command's flags override them.\n",
        _table(_HEADER, _config_rows(EvalConfig, skip=("games",))),
        "### `games`\n",
        "A list; each entry is a game name or a mapping of these keys "
        "(`evaluation.suites.EvalGame`). Empty: the `suite`'s games.\n",
        _table(_HEADER, _config_rows(EvalGame, "games[i].", skip=("weight",))),
    ]


def config_page() -> str:
    """`reference/config.md`: the training, tournament and evaluation configs, key by key."""
    out = [
        "# Configuration\n",
        "Generated from the config dataclasses' field docstrings when the site is built "
        "(`training/config.py`, `tournaments/config.py`, `evaluation/suites.py` and the "
        "sections they hold). Defaults are shown as YAML.\n",
        *_train_section(),
        *_tournament_section(),
        *_eval_section(),
    ]
    return "\n".join(out)


# --- reference/games.md -------------------------------------------------------------------


def _sample_prompt(name: str) -> str:
    import games

    env = games.make(name)
    env.reset(seed=0)
    return env.view(env.agent_selection).prompt()


def games_page() -> str:
    """`reference/games.md`: every catalogue game, from its module's docstring."""
    import importlib

    import games

    out = [
        "# Games\n",
        "Generated from `games.CATALOGUE` and each game module's docstring when the site is "
        "built; `arena games show NAME` prints the same with a sample prompt for every seat. "
        "Any other OpenSpiel game plays as `openspiel:<name>` ([below](#any-openspiel-game)).\n",
        _table(
            ["game", "players", "information", "kind", "moves", "split", "rules"],
            [
                [
                    f"[`{n}`](#{n})",
                    str(e.info.num_players),
                    e.info.information,
                    e.info.kind,
                    e.info.dynamics,
                    e.info.split,
                    e.info.source,
                ]
                for n, e in games.CATALOGUE.items()
            ],
        ),
    ]
    shown: dict[str, str] = {}
    for name, entry in games.CATALOGUE.items():
        out.append(f"## {name}\n")
        out.append(f"{_escape(entry.info.description)}.\n")
        facts = [
            f"`games.make({name!r})`",
            f"module `{entry.module}`",
            f"split `{entry.info.split}`",
        ]
        if entry.params:
            facts.append("preset " + ", ".join(f"`{k}={v!r}`" for k, v in entry.params.items()))
        out.append(" · ".join(facts) + "\n")
        if entry.module in shown:
            out.append(f"Rules and text as in [`{shown[entry.module]}`](#{shown[entry.module]}).\n")
        else:
            shown[entry.module] = name
            doc = inspect.cleandoc(importlib.import_module(entry.module).__doc__ or "")
            title, _, body = doc.partition("\n")
            out.append(_escape(title) + "\n")
            if body.strip():
                out.append(f"```text\n{body.strip()}\n```\n")
        prompt = _sample_prompt(name)
        body = "\n".join("    " + line for line in f"```text\n{prompt}\n```".splitlines())
        out.append(f'??? example "Sample prompt (first seat to move, seed 0)"\n\n{body}\n')
    doc = inspect.cleandoc(importlib.import_module("games.openspiel_env").__doc__ or "")
    title, _, body = doc.partition("\n")
    out += [
        "## Any OpenSpiel game\n",
        _escape(title) + "\n",
        f"```text\n{body.strip()}\n```\n",
    ]
    return "\n".join(out)


# --- reference/dataset.md -----------------------------------------------------------------


def dataset_page() -> str:
    """`reference/dataset.md`: the columns of the turn and match rows, from `arena.dataset`."""
    from arena import dataset

    def rows(columns) -> list[list[str]]:
        return [[f"`{n}`", f"`{t}`", _escape(doc)] for n, t, doc in columns]

    return "\n".join(
        [
            "# Dataset schema\n",
            "The columns `arena export trajectories` writes (Parquet, or a `datasets` folder "
            "with `--format hf`), generated from `arena.dataset` when the site is built; types "
            "are Arrow's (a `datasets` feature of the same name). A bot's turn has empty chat and "
            "token columns and a null `finish_reason`; other nulls are said per column. "
            "[Exporting results](../guides/export.md) shows how to write and read them.\n",
            "## A row per agent turn (`--per turn`, the default)\n",
            _table(["column", "type", "meaning"], rows(dataset.TURN_COLUMNS)),
            "## A row per match (`--per match`)\n",
            "Lists are in seat order (`seats`).\n",
            _table(["column", "type", "meaning"], rows(dataset.MATCH_COLUMNS)),
        ]
    )


# --- the hook -----------------------------------------------------------------------------

PAGES = {
    "reference/cli.md": cli_page,
    "reference/config.md": config_page,
    "reference/games.md": games_page,
    "reference/dataset.md": dataset_page,
}


def on_config(config):
    """The project's packages import from the repository root, wherever mkdocs was started."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return config


def on_files(files, config):
    """Add the generated pages to the site (they exist only in the build)."""
    from mkdocs.structure.files import File

    for path, make in PAGES.items():
        files.append(File.generated(config, path, content=make()))
    return files


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "site-reference")
    for path, make in PAGES.items():
        target = out_dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(make(), encoding="utf-8")
        print(target)
