"""core.typed_config: each rule kind gives its one-line error naming the key."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from core.typed_config import (
    above,
    at_least,
    build,
    check_fields,
    did_you_mean,
    option,
    rules,
    within,
)


@dataclass
class Inner:
    rate: float = option(0.5, check=within(0, 1))
    """a share"""
    mode: str = option("fast", choices=("fast", "slow"))
    """how"""


@dataclass
class Outer:
    steps: int = option(10, check=at_least(1))
    """steps"""
    scale: float = option(1.0, check=above(0))
    """scale"""
    flag: bool | str = option("auto", choices=(True, False, "auto"))
    """on, off or auto"""
    count: int = option(
        3, what="a positive integer", check=(lambda v: v >= 1, "a positive integer")
    )
    """a count with its own wording"""
    pair: tuple[float, float] = (0.1, 0.2)
    """two numbers"""
    later: str = option("b", choices=lambda: LATER)
    """choices defined after the class"""
    inner: Inner = field(default_factory=Inner)
    """a section"""


LATER = ("a", "b")


def error(d: dict, **kw) -> str:
    with pytest.raises(ValueError) as e:
        build(Outer, d, **kw)
    message = str(e.value)
    assert "\n" not in message
    return message


def test_defaults_and_given_values():
    cfg = build(Outer, {"steps": 5, "scale": 2, "pair": [0.3, 0.4], "inner": {"mode": "slow"}})
    assert cfg == Outer(steps=5, scale=2.0, pair=(0.3, 0.4), inner=Inner(mode="slow"))
    assert isinstance(cfg.scale, float) and isinstance(cfg.pair, tuple)
    assert build(Outer, None) == Outer()
    base = Outer(steps=7)
    assert build(Outer, {"scale": 3.0}, base=base) == Outer(steps=7, scale=3.0)


def test_unknown_key_names_it_with_a_did_you_mean_and_the_known_keys():
    assert error({"stepz": 3}) == (
        "unknown key 'stepz' (did you mean 'steps'?) (known in the config: steps, scale, flag, "
        "count, pair, later, inner)"
    )
    assert error({"inner": {"rat": 0.1}}).startswith(
        "unknown key 'inner.rat' (did you mean 'rate'?) (known in inner: rate, mode)"
    )


def test_wrong_type():
    assert error({"steps": "ten"}) == "steps must be int, got 'ten'"
    assert error({"steps": True}) == "steps must be int, got True"
    assert error({"flag": 1}) == "flag must be bool or str, got 1"
    assert error({"count": 1.5}) == "count must be a positive integer, got 1.5"
    assert error({"inner": [1]}) == "inner must be a mapping, got list"


def test_not_finite():
    assert error({"scale": float("nan")}) == "scale must be a finite number, got nan"


def test_not_one_of_the_choices_with_a_did_you_mean():
    assert error({"inner": {"mode": "slw"}}) == (
        "inner.mode must be one of fast, slow, got 'slw' (did you mean 'slow'?)"
    )
    assert error({"flag": "yes"}) == "flag must be one of true, false, auto, got 'yes'"
    assert error({"later": "c"}) == "later must be one of a, b, got 'c'"


def test_out_of_range():
    assert error({"steps": 0}) == "steps must be >= 1, got 0"
    assert error({"scale": 0}) == "scale must be > 0, got 0.0"
    assert error({"inner": {"rate": 2}}) == "inner.rate must be in [0, 1], got 2.0"
    assert error({"count": 0}) == "count must be a positive integer, got 0"


def test_refused_keys_and_where():
    refuse = lambda key, value: "set by the loop" if key == "inner.rate" else None  # noqa: E731
    assert error({"inner": {"rate": 0.1}}, refuse=refuse) == "set by the loop"
    assert error({"steps": 0}, where="run") == "run.steps must be >= 1, got 0"


def test_check_fields_applies_the_rules_to_a_dataclass_built_in_code():
    check_fields(Outer())
    with pytest.raises(ValueError, match=r"^steps must be >= 1, got 0$"):
        check_fields(Outer(steps=0))


def test_rules_lists_each_key_with_a_rule():
    found = rules(Outer)
    assert found["steps"] == (None, ">= 1")
    assert found["inner.mode"] == (["fast", "slow"], None)
    assert found["flag"] == (["true", "false", "auto"], None)
    assert "pair" not in found


def test_did_you_mean():
    assert did_you_mean("cosin", ["constant", "cosine"]) == " (did you mean 'cosine'?)"
    assert did_you_mean("zzz", ["constant", "cosine"]) == ""
