"""Settings the local launchers read from the environment (``make run``, ``make fleet-local``).

:func:`port_setting` refuses a port that is not a number or out of range by naming the variable (a
traceback or a silent port 0 was what a newcomer got, issue 38); :func:`kept_secret` keeps a
generated token or key in the data directory (mode 0600) so a restart keeps it and the token a user
exported in another shell goes on working.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["SettingError", "kept_secret", "port_setting"]


class SettingError(ValueError):
    """A setting (environment variable) is unusable; the message names it."""


def port_setting(name: str, default: int, *, span: int = 1) -> int:
    """Read a base port from environment variable ``name``.

    Args:
        name: The variable (e.g. ``CREWLET_PORT``).
        default: The port when the variable is unset or blank.
        span: How many consecutive ports from it are used (all must be valid ports).

    Returns:
        The base port, in 1..65536 - span.

    Raises:
        SettingError: not an integer, or out of range (the message names the variable).
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        port = int(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not a port number (1..65535)") from None
    if not 1 <= port <= 65536 - span:
        raise SettingError(f"{name}={port} is out of range: use 1..{65536 - span}")
    return port


def kept_secret(data_dir: Path, env: str, file: str, make: Callable[[], str]) -> tuple[str, str]:
    """Return ``(value, where)``: ``env``'s value, else the one kept in ``data_dir/file``, else a new
    one from ``make()`` written there with mode 0600.

    Args:
        data_dir: The directory holding the kept file (created when missing).
        env: The environment variable that wins when set.
        file: The file name under ``data_dir``.
        make: Makes a fresh value.

    Returns:
        The value, and where it came from: ``"env"``, ``"kept"`` or ``"new"``.
    """
    value = os.environ.get(env)
    if value:
        return value, "env"
    path = data_dir / file
    if path.is_file():
        kept = path.read_text().strip()
        if kept:
            return kept, "kept"
    data_dir.mkdir(parents=True, exist_ok=True)
    value = make()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    path.chmod(0o600)
    return value, "new"
