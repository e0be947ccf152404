"""Secret names (CO-5, CO-40): the ``NAME`` of a Tier B ``${NAME}`` reference the store answers.

A name is upper-case letters, digits and ``_``, starting with a letter, at most
:data:`MAX_NAME_CHARS` characters. That is the environment-variable convention the company
document's references already follow (``${OPENAI_API_KEY}``), a subset of what a NATS KV key
allows (so a name is its own key in ``crewlet_secrets``), and safe to print: a name is never secret.
"""

from __future__ import annotations

import re

from ._errors import InvalidSecretName

__all__ = ["MAX_NAME_CHARS", "NAME_PATTERN", "validate_name"]

NAME_PATTERN = r"^[A-Z][A-Z0-9_]*$"
"""The grammar of a secret name (ours; the environment-variable convention, upper case only)."""

MAX_NAME_CHARS = 128
"""The longest secret name, in characters (ours: generous for ``VENDOR_PURPOSE_KEY`` names, and far
under NATS's subject limits)."""

_NAME = re.compile(NAME_PATTERN)


def validate_name(name: str) -> str:
    """Return ``name`` when it is a valid secret name.

    Args:
        name: The candidate name (e.g. ``OPENAI_API_KEY``).

    Returns:
        ``name``, unchanged.

    Raises:
        InvalidSecretName: ``name`` is empty, longer than :data:`MAX_NAME_CHARS` characters, or
            outside :data:`NAME_PATTERN`; the message names the name and the pattern.
    """
    if not isinstance(name, str) or not name:
        raise InvalidSecretName(
            "",
            f"a secret name is required: upper-case letters, digits and _, starting with a letter ({NAME_PATTERN})",
        )
    if len(name) > MAX_NAME_CHARS:
        raise InvalidSecretName(
            name, f"secret name {name[:32]!r}... is {len(name)} characters; the limit is {MAX_NAME_CHARS}"
        )
    if not _NAME.fullmatch(name):  # fullmatch: "$" alone would admit a trailing newline
        raise InvalidSecretName(
            name,
            f"{name!r} is not a secret name: use upper-case letters, digits and _, starting with a letter "
            f"({NAME_PATTERN}), at most {MAX_NAME_CHARS} characters",
        )
    return name
