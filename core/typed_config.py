"""Config dataclasses built from mappings (parsed YAML), each key's rule stated next to its field.

A field declares what it may hold with `option`:

    steps: int = option(100, check=at_least(1))
    \"\"\"training steps\"\"\"
    backend: str = option("transformers", choices=("transformers", "vllm"))
    \"\"\"rollout backend\"\"\"

`build(cls, mapping, where)` makes the dataclass and checks every key it is given: known
keys (with a did-you-mean), types (from the hints; an int is a float where a float is
wanted, a list a tuple), finite numbers, the field's choices and its check. Every error
is one line naming the key: `learner.lr must be > 0, got -0.001`. Rules that involve
several keys stay with the section (its `__post_init__` or a validate function);
`check_fields(obj)` applies the field rules to a dataclass built in code.
"""

from __future__ import annotations

import difflib
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, field, fields, is_dataclass, replace
from typing import Any

Rule = tuple[Callable[[Any], bool], str]  # (test, what the value must be)
Refuse = Callable[[str, Any], "str | None"]  # (dotted key, value) -> why it may not be set, or None


def option(
    default: Any = MISSING,
    *,
    factory: Callable[[], Any] | Any = MISSING,
    choices: tuple | list | Callable[[], tuple] | None = None,
    check: Rule | None = None,
    what: str | None = None,
) -> Any:
    """A dataclass field with its rule: `choices` (the values it accepts, named with a
    did-you-mean when another is given; a function returning them where they are defined
    after the dataclass), `check` (a test and what the value must be) and
    `what` (what a value of the wrong type is told it must be; default: the type's name)."""
    metadata = {}
    if choices is not None:
        metadata["choices"] = choices if callable(choices) else tuple(choices)
    if check is not None:
        metadata["check"] = check
    if what is not None:
        metadata["what"] = what
    return field(default=default, default_factory=factory, metadata=metadata)


def at_least(lo: float) -> Rule:
    return lambda v: v >= lo, f">= {lo}"


def above(lo: float) -> Rule:
    return lambda v: v > lo, f"> {lo}"


def within(lo: float, hi: float, closed_high: bool = True) -> Rule:
    """lo <= v <= hi (closed_high) or lo <= v < hi."""
    if closed_high:
        return lambda v: lo <= v <= hi, f"in [{lo}, {hi}]"
    return lambda v: lo <= v < hi, f"in [{lo}, {hi})"


def did_you_mean(value: Any, names) -> str:
    """' (did you mean 'x'?)' for the closest of `names`, or ''."""
    close = difflib.get_close_matches(str(value), [str(n) for n in names], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def choice_names(choices: tuple) -> list:
    """The choices as a YAML file writes them (true/false for booleans)."""
    return [str(n).lower() if isinstance(n, bool) else n for n in choices]


def field_choices(f) -> tuple | None:
    """The values field `f` accepts (None: any of its type)."""
    choices = f.metadata.get("choices")
    return tuple(choices()) if callable(choices) else choices


def field_error(path: str, f, value: Any) -> str | None:
    """The one-line error of `value` for field `f` (named `path`) by its choices and check, or None."""
    choices = field_choices(f)
    if choices is not None and value not in choices:
        names = choice_names(choices)
        return f"{path} must be one of {', '.join(map(str, names))}, got {value!r}{did_you_mean(value, names)}"
    check = f.metadata.get("check")
    if check is not None and not check[0](value):
        return f"{path} must be {check[1]}, got {value!r}"
    return None


def check_fields(obj: Any) -> None:
    """ValueError (one line) for the first field of dataclass `obj` that breaks its rule."""
    for f in fields(obj):
        error = field_error(f.name, f, getattr(obj, f.name))
        if error:
            raise ValueError(error)


def allowed_types(hint) -> tuple | None:
    """The runtime types a type hint allows (None: anything)."""
    if hint is Any or isinstance(hint, typing.TypeVar):
        return None
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        out = []
        for a in args:
            o = allowed_types(a)
            if o is None:
                return None
            out += o
        return tuple(out)
    if hint is type(None):
        return (type(None),)
    if origin is not None:
        return (origin,)
    return (hint,) if isinstance(hint, type) else None


def check_keys(cls: type, d: Mapping, where: str) -> None:
    """ValueError for keys of `d` that are not fields of `cls` (one line: did-you-mean, the known keys)."""
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(d) - set(known), key=str)
    if unknown:
        name = f"{where}." if where else ""
        hint = did_you_mean(unknown[0], known) if len(unknown) == 1 else ""
        raise ValueError(
            f"unknown key {', '.join(repr(name + str(k)) for k in unknown)}{hint} (known in {where or 'the config'}: {', '.join(known)})"
        )


def typed_value(path: str, f, hint, value: Any) -> Any:
    """`value` for field `f` coerced to its type (int -> float, list -> tuple) and checked:
    type, finite, choices, check."""
    allowed = allowed_types(hint)
    if allowed is not None:
        if float in allowed and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if tuple in allowed and isinstance(value, list):
            value = tuple(value)
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            want = f.metadata.get("what") or " or ".join(
                "null" if t is type(None) else t.__name__ for t in allowed
            )
            raise ValueError(f"{path} must be {want}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{path} must be a finite number, got {value}")
    error = field_error(path, f, value)
    if error:
        raise ValueError(error)
    return value


def _default(f) -> Any:
    """The default value of field `f` (None: it has none)."""
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else None


def build(cls: type, d: Any, where: str = "", base: Any = None, refuse: Refuse | None = None):
    """A `cls` dataclass from mapping `d` (None: empty) over the values of `base` (default: the defaults),
    sections (dataclass fields) built from their own mappings; every given key checked.

    `where`: the dotted name of `d` in the whole config ("" at the top); `refuse(key, value)`:
    why a key may not be set (a one-line message) or None. Errors raised by `cls.__post_init__`
    are prefixed with `where`."""
    if d is None:
        d = {}
    if not isinstance(d, Mapping):
        raise ValueError(f"{where or 'config'} must be a mapping, got {type(d).__name__}")
    check_keys(cls, d, where)
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in fields(cls)}
    kwargs = {}
    for key, value in d.items():
        hint, path = hints[key], f"{where}.{key}" if where else key
        reason = refuse(path, value) if refuse else None
        if reason:
            raise ValueError(reason)
        if is_dataclass(hint):
            section = getattr(base, key) if base is not None else _default(by_name[key])
            kwargs[key] = build(hint, value, path, section, refuse)
        else:
            kwargs[key] = typed_value(path, by_name[key], hint, value)
    try:
        return replace(base, **kwargs) if base is not None else cls(**kwargs)
    except ValueError as e:
        raise ValueError(f"{where}: {e}" if where else str(e)) from None


def rules(cls: type, prefix: str = "") -> dict[str, tuple[list | None, str | None]]:
    """{dotted key: (its choices as YAML writes them, what its check says it must be)} of the
    keys of `cls` and its sections that have a rule (for the reference pages)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        key = prefix + f.name
        if is_dataclass(hints[f.name]):
            out.update(rules(hints[f.name], key + "."))
            continue
        choices, check = field_choices(f), f.metadata.get("check")
        if choices is not None or check is not None:
            out[key] = (
                choice_names(choices) if choices is not None else None,
                check[1] if check is not None else None,
            )
    return out
