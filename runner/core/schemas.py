"""The project's JSON Schemas (runner/core/schemas/*.schema.json) and short, one-line error messages."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any


SCHEMAS = ("evals-flat", "evals-agentskills", "skill-card", "bundle-card", "report", "gpu-results", "run", "record", "problem", "problem-draw")

_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer", float: "a number", type(None): "null"}


@dataclass(frozen=True)
class SchemaProblem:
    """One place an instance breaks its schema (a value, not an exception)."""

    path: tuple[Any, ...]
    message: str

    @property
    def where(self) -> str:
        out = "$"
        for key in self.path:
            out += f"[{key}]" if isinstance(key, int) else f".{key}"
        return out


@cache
def schema(name: str) -> dict:
    if name not in SCHEMAS:
        raise KeyError(name)
    text = resources.files(__package__).joinpath("schemas", f"{name}.schema.json").read_text("utf-8")
    return json.loads(text)


@cache
def _validator(name: str):
    import jsonschema  # loaded on the first check, not at import

    return jsonschema.Draft202012Validator(schema(name))


def _type_name(json_type: str) -> str:
    return {"object": "an object", "array": "an array", "string": "a string", "boolean": "a boolean", "integer": "an integer", "number": "a number", "null": "null"}.get(json_type, json_type)


def _describe(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _message(error) -> str:
    from jsonschema.exceptions import best_match

    kind, expected, value = error.validator, error.validator_value, error.instance
    if kind in ("oneOf", "anyOf") and error.context:
        shallow = [e for e in error.context if not e.relative_path]
        types = [e.validator_value for e in shallow if e.validator == "type"]
        if len(types) == len(expected):  # every branch failed on type alone
            return f"must be {' or '.join(_type_name(t) for t in types)}, not {_describe(value)}"
        return _message(best_match([e for e in error.context if e.validator != "type"] or error.context))
    if kind == "type":
        wanted = " or ".join(_type_name(t) for t in ([expected] if isinstance(expected, str) else expected))
        return f"must be {wanted}, not {_describe(value)}"
    if kind in ("minLength", "pattern") and isinstance(value, str):
        return "must be a non-empty string" if not value.strip() else f"{_short(value)} does not match {expected!r}"
    if kind == "minItems":
        return f"must have at least {expected} item{'s' if expected != 1 else ''}"
    if kind == "maxLength":
        return f"must be at most {expected} characters (has {len(value)})"
    if kind == "enum":
        return f"must be one of {', '.join(map(str, expected))}; got {_short(value)}"
    if kind == "const":
        return f"must be {_short(expected)}; got {_short(value)}"
    if kind == "uniqueItems":
        return "must not repeat items"
    if kind == "not" and isinstance(expected, dict) and "required" in expected:
        keys = expected["required"]
        if len(keys) == 1:
            return f"must not have {keys[0]!r} here"
        return f"must not have both {' and '.join(repr(k) for k in keys)}"
    message = error.message
    return message if len(message) <= 200 else message[:197] + "..."


def check_schema(name: str, instance: Any) -> list[SchemaProblem]:
    """Validate `instance` against schema `name`; errors sorted by where they are."""
    from jsonschema.exceptions import best_match

    errors = []
    for error in _validator(name).iter_errors(instance):
        path = tuple(error.absolute_path)
        message = _message(error)
        if error.validator in ("oneOf", "anyOf") and error.context and not message.startswith("must be "):
            path = path + tuple(best_match(error.context).relative_path)
        found = SchemaProblem(path, message)
        if found not in errors:
            errors.append(found)
    return sorted(errors, key=lambda e: [str(k) for k in e.path])
