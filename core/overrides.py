"""`KEY=VALUE` flags: `--set learner.lr=1e-4` (arena train, the transfer study) and `--param rounds=3` (arena play, eval).

Values are read as YAML (5, -2.0, true, [1, 2], text); a number with an exponent but no dot
(1e-4) is a number too, where YAML 1.1 would keep it as text. Kept free of heavy imports:
`arena play` parses its flags before any model loads.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml

EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")  # 1e-4, 3E5: YAML 1.1 wants 1.0e-4


def parse_value(text: str, where: str) -> Any:
    """One flag value read as YAML; ValueError naming `where` when it is not YAML."""
    if EXPONENT.fullmatch(text.strip()):
        return float(text)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(
            f"{where}: {text!r} is not a YAML value ({getattr(e, 'problem', None) or type(e).__name__})"
        ) from None


def key_values(items: list[str] | None, flag: str) -> list[tuple[str, Any]]:
    """`KEY=VALUE` items -> (key, value) pairs, in order; ValueError (one line) for an item without `KEY=`."""
    out = []
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"{flag} takes KEY=VALUE, got {item!r}")
        out.append((key.strip(), parse_value(value, f"{flag} {key.strip()}")))
    return out


def parse_overrides(items: list[str] | None, flag: str = "--set") -> dict:
    """`--set` items -> a nested mapping: a dotted key names a key in a section (learner.loss.kl_coef=0.1)."""
    out: dict = {}
    for key, value in key_values(items, flag):
        node = out
        *sections, leaf = key.split(".")
        for part in sections:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"{flag} {key}: {part} was set to a value, so it has no keys")
        node[leaf] = value
    return out


def merge(base: dict, over: dict) -> dict:
    """`base` with `over`'s keys replaced; nested mappings merged key by key."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = (
            merge(out[k], v)
            if isinstance(v, dict) and isinstance(out.get(k), dict)
            else copy.deepcopy(v)
        )
    return out


def game_params(pairs: list[str] | None) -> dict:
    """`--param KEY=VALUE` flags -> game parameters (values read as YAML: 5, -2.0, true, [1, 2])."""
    return dict(key_values(pairs, "--param"))
