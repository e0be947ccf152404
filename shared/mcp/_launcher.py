"""The launcher of stdio MCP children: tie the child to the node's life, then exec it (CO-34, FL-66).

Run as a script (``python -I -S _launcher.py <parent pid> <kept names> <command> [args...]``),
never imported by the engine: it uses the standard library only so it starts in a few
milliseconds. It

1. asks the kernel to SIGKILL this process when its parent (the node's thread that spawned it)
   dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), then checks the parent is still the one that
   spawned it (a parent that died before the ``prctl`` would never deliver the signal);
2. makes sure it leads its own process group (the engine spawns it in a new session already), so
   stopping the server signals the whole group;
3. keeps only the environment variables named in ``<kept names>`` (a comma-separated list),
   so the child sees exactly the allow-list plus the server's ``env`` and the seat's ``mcp_env``;
4. writes ``crewlet-mcp-launcher pid=<pid>`` on stderr (the pid survives the exec: it is the
   server's pid and its process group id);
5. ``execvpe``'s the command (PATH looked up in the kept environment). The death signal survives
   the exec, so a ``kill -9`` of the node takes the server with it.

A command that cannot be executed is reported on stderr and the launcher exits with 127 (not
found) or 126 (not executable), as a shell does.

Not guaranteed: a server's own grandchildren do not inherit the death signal; they die with the
group on a stop, but after a ``kill -9`` of the node only if they notice their parent's exit
(most exit on stdin EOF).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PID_LINE_PREFIX = "crewlet-mcp-launcher pid="


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def main(argv: list[str]) -> int:
    """Run the launcher; returns an exit status only when the exec did not happen."""
    if len(argv) < 4:
        _say("crewlet-mcp-launcher: usage: <parent pid> <kept names> <command> [args...]")
        return 2
    expected_parent = int(argv[1])
    kept = {name for name in argv[2].split(",") if name}
    command, args = argv[3], argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        _say(f"crewlet-mcp-launcher: prctl(PR_SET_PDEATHSIG) failed: errno {ctypes.get_errno()}")
        return 126
    if os.getppid() != expected_parent:
        return 1  # the node died before the death signal was armed: nobody is waiting
    if os.getpgid(0) != os.getpid():
        os.setpgid(0, 0)
    env = {k: v for k, v in os.environ.items() if k in kept}
    _say(f"{PID_LINE_PREFIX}{os.getpid()}")
    try:
        os.execvpe(command, args, env)
    except FileNotFoundError:
        _say(f"crewlet-mcp-launcher: command not found: {command}")
        return 127
    except PermissionError:
        _say(f"crewlet-mcp-launcher: command is not executable: {command}")
        return 126
    except OSError as e:
        _say(f"crewlet-mcp-launcher: cannot execute {command}: {e.strerror or e}")
        return 126


if __name__ == "__main__":
    sys.exit(main(sys.argv))
