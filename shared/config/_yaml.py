"""Reading a YAML config file into plain data, with every failure named by file.

Missing file, unreadable file, empty file, YAML syntax error, or a top level that is not a
mapping each become one :class:`~shared.config.Issue` (type ``invalid`` or ``missing``), never a
traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ._issues import ConfigInvalid, Issue

__all__ = ["MAX_DEPTH", "read_yaml_mapping", "too_deep"]

MAX_DEPTH = 64
"""The deepest nesting a config document may have (ours, issue 38: no real document nears it, and a
500-deep list ended every walk over the document in a ``RecursionError`` traceback)."""


def too_deep(data: Any, limit: int = MAX_DEPTH) -> str | None:
    """Return the dotted path of the first place ``data`` nests deeper than ``limit`` levels, else None.

    Iterative (a recursive walk would itself overflow on the input it guards against).
    """
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > limit:
            return (path if len(path) <= 80 else path[:60] + "...") or "(top)"
        if isinstance(value, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
    return None


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a key repeated in one mapping (YAML would keep the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """Load ``path`` as a YAML mapping.

    Args:
        path: The file to read.

    Returns:
        The top-level mapping, with keys as written.

    Raises:
        ConfigInvalid: the file is missing, unreadable, not UTF-8, empty, not valid YAML, or its
            top level is not a mapping. The single issue names the file (and line for syntax).
    """
    name = str(path)
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigInvalid([Issue(name, "", "missing", "no such file")]) from None
    except IsADirectoryError:
        raise ConfigInvalid([Issue(name, "", "invalid", "is a directory, not a file")]) from None
    except UnicodeDecodeError as e:
        raise ConfigInvalid([Issue(name, "", "invalid", f"not UTF-8 text ({e.reason})")]) from None
    except OSError as e:
        raise ConfigInvalid([Issue(name, "", "invalid", f"cannot read: {e.strerror}")]) from None
    if not text.strip():
        raise ConfigInvalid([Issue(name, "", "missing", "file is empty")])
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigInvalid(
            [Issue(name, "", "invalid", f"YAML syntax error: {where}{e.problem or e}")]
        ) from None
    except yaml.YAMLError as e:
        raise ConfigInvalid([Issue(name, "", "invalid", f"YAML error: {e}")]) from None
    except RecursionError:  # the parser recurses per level: a list nested ~1 000 deep ends here
        raise ConfigInvalid(
            [Issue(name, "", "invalid", f"nested too deeply (more than {MAX_DEPTH} levels)")]
        ) from None
    deep = too_deep(data)
    if deep is not None:
        raise ConfigInvalid(
            [Issue(name, deep, "invalid", f"nested too deeply (more than {MAX_DEPTH} levels)")]
        )
    if data is None:
        raise ConfigInvalid([Issue(name, "", "missing", "file is empty (only comments, no document)")])
    if not isinstance(data, dict):
        raise ConfigInvalid(
            [Issue(name, "", "shape", f"top level must be a mapping, got {type(data).__name__}")]
        )
    return data
