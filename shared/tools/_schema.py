"""A small JSON Schema validator for the subset our tool definitions use (CO-16, CO-23).

Supported keywords: ``type`` (a name or a list), ``enum``, ``properties``, ``required``,
``additionalProperties`` (boolean), ``items``, ``minLength``/``maxLength``, ``pattern``,
``minimum``/``maximum``, ``minItems``/``maxItems``. Anything else in a schema is ignored (it
documents, it does not constrain). ``true`` is not an integer, and an integer is written without a
fraction (``1.0`` is a number, not an integer: a handler can rely on getting an ``int``).

Written here rather than pulled from ``jsonschema`` because the subset is small and a model's
bad arguments must come back as readable lines, one per problem, not as an exception.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["arguments", "validate"]

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
}


def _is(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if isinstance(value, bool) and name != "boolean":
        return False
    return isinstance(value, _TYPES.get(name, ()))


def _where(path: str) -> str:
    return path or "arguments"


def validate(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Check ``value`` against ``schema``.

    Args:
        value: The decoded JSON value (the model's arguments object at the top).
        schema: A schema in the supported subset.
        path: Where ``value`` sits, for the messages ("" for the top).

    Returns:
        One ``"<path>: <message>"`` line per problem; empty when ``value`` conforms.
    """
    problems: list[str] = []
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_is(value, n) for n in names):
            got = "null" if value is None else type(value).__name__
            return [f"{_where(path)}: expected {' or '.join(names)}, got {got}"]
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(v) for v in schema["enum"])
        problems.append(f"{_where(path)}: {value!r} is not one of {allowed}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            problems.append(f"{_where(path)}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{_where(path)}: longer than {schema['maxLength']} characters")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{_where(path)}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{_where(path)}: {value} is below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{_where(path)}: {value} is above the maximum {schema['maximum']}")
    if isinstance(value, list | tuple):
        if "minItems" in schema and len(value) < schema["minItems"]:
            problems.append(f"{_where(path)}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(f"{_where(path)}: more than {schema['maxItems']} items")
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                problems.extend(validate(item, items, f"{path}[{i}]"))
    if isinstance(value, dict):
        properties: dict[str, Any] = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                problems.append(f"{_join(path, name)}: required")
        for name, item in value.items():
            if name in properties:
                problems.extend(validate(item, properties[name], _join(path, name)))
            elif schema.get("additionalProperties") is False:
                known = ", ".join(properties) or "none"
                problems.append(f"{_join(path, name)}: not an argument of this tool (known: {known})")
    return problems


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def arguments(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    """The schema of a tool's arguments: an object of ``properties``, ``required`` named, no others.

    Args:
        properties: Argument name → its schema.
        required: The names the model must give; none for all optional.

    Returns:
        ``{"type": "object", "properties", "required"?, "additionalProperties": False}``
        (``required`` only when some are).
    """
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    schema["additionalProperties"] = False
    return schema
