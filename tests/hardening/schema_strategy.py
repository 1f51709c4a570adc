"""Hypothesis strategies from the JSON Schema that ``mesh.schema`` publishes.

A small converter for the subset msgspec emits (``type``, ``properties``,
``required``, ``additionalProperties``, ``enum``, ``const``, ``anyOf``, ``$ref`` into
``$defs``, string length and ``pattern``, number bounds, ``items``), so the fuzzer
needs no package beyond hypothesis. :func:`mutated` then breaks valid params on
purpose: wrong types, unknown fields, dropped required fields, huge or deep values.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
"""Any JSON value (small)."""


class Deep:
    """``n`` nested arrays, written out by :func:`encode` (``json.dumps`` would recurse)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __repr__(self) -> str:
        return f"Deep({self.n})"


def encode(value: Any) -> bytes:
    """Compact JSON for ``value``, with each :class:`Deep` expanded in place."""
    deep: dict[str, int] = {}

    def placeholder(obj: object) -> str:
        if not isinstance(obj, Deep):
            raise TypeError(type(obj).__name__)
        key = f"@@deep{len(deep)}@@"
        deep[key] = obj.n
        return key

    out = json.dumps(value, separators=(",", ":"), default=placeholder).encode()
    for key, n in deep.items():
        out = out.replace(f'"{key}"'.encode(), b"[" * n + b"]" * n)
    return out


HUGE_INTS = st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, -(10**30)])


def from_schema(  # noqa: PLR0912 - one branch per JSON Schema keyword, flat on purpose
    schema: dict[str, Any], defs: dict[str, Any], depth: int = 0
) -> Any:
    """A strategy for values valid under ``schema`` (best effort; the daemon has the last word)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return st.deferred(lambda: from_schema(defs[name], defs, depth + 1))
    if "anyOf" in schema:
        return st.one_of([from_schema(s, defs, depth) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": k}, defs, depth) for k in kind])
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        lo = schema.get("minimum")
        hi = schema.get("maximum")
        if "exclusiveMinimum" in schema:
            lo = int(schema["exclusiveMinimum"]) + 1
        if "exclusiveMaximum" in schema:
            hi = int(schema["exclusiveMaximum"]) - 1
        return st.integers(min_value=lo, max_value=hi)
    if kind == "number":
        return st.floats(
            min_value=schema.get("minimum", schema.get("exclusiveMinimum")),
            max_value=schema.get("maximum", schema.get("exclusiveMaximum")),
            exclude_min="exclusiveMinimum" in schema,
            exclude_max="exclusiveMaximum" in schema,
            allow_nan=False,
            allow_infinity=False,
        )
    if kind == "string":
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        if "pattern" in schema:

            def fits(v: str) -> bool:
                return int(lo or 0) <= len(v) and (hi is None or len(v) <= int(hi))

            return st.from_regex(schema["pattern"], fullmatch=True).filter(fits)
        return st.text(min_size=lo, max_size=min(hi, 40) if hi is not None else 40)
    if kind == "array":
        items = schema.get("items", {})
        lo = schema.get("minItems", 0)
        hi = min(schema.get("maxItems", 4), 4)
        return st.lists(from_schema(items, defs, depth + 1), min_size=lo, max_size=max(lo, hi))
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        req = {k: from_schema(v, defs, depth + 1) for k, v in props.items() if k in required}
        opt = {k: from_schema(v, defs, depth + 1) for k, v in props.items() if k not in required}
        if not props and schema.get("additionalProperties", True) is not False:
            return st.dictionaries(st.text(max_size=8), JSON, max_size=3)
        return st.fixed_dictionaries(req, optional=opt)
    return JSON


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[Any]) -> Any:
    """Valid params, then (mostly) one deliberate defect."""
    value = draw(valid)
    how = draw(
        st.sampled_from(
            ["none", "unknown", "wrong_type", "drop", "huge", "deep", "not_object", "nul"]
        )
    )
    if how == "not_object" or not isinstance(value, dict):
        return draw(JSON)
    value = dict(value)
    keys = sorted(value)
    if how == "unknown":
        value[draw(st.text(min_size=1, max_size=12))] = draw(JSON)
    elif how == "wrong_type" and keys:
        value[draw(st.sampled_from(keys))] = draw(JSON)
    elif how == "drop" and keys:
        del value[draw(st.sampled_from(keys))]
    elif how == "huge" and keys:
        value[draw(st.sampled_from(keys))] = draw(
            HUGE_INTS | st.just("x" * 200_000) | st.just(1e308) | st.just([0] * 50_000)
        )
    elif how == "deep" and keys:
        value[draw(st.sampled_from(keys))] = Deep(draw(st.integers(50, 100_000)))
    elif how == "nul" and keys:
        value[draw(st.sampled_from(keys))] = "a\x00b"
    return value
