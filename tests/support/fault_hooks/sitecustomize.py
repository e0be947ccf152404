"""Fault hooks a test turns on inside a real node process (spec/agent.md "Fault hook"; nothing in
production code): this directory goes on the node's ``PYTHONPATH`` and ``CREWLET_FAULT_HOOKS``
names the hooks, ``name:arg,arg;name2:...``.

- ``memory_hydrate:<seat>,...`` (AG-7): a satellite's scratch replay of those seats' memory raises
  ``HydrationFailed("fault")``, so the seat is released ``acquire_failed`` and another node takes it.
"""

from __future__ import annotations

import os
from typing import Any

_HOOKS = {
    name: set(filter(None, args.split(",")))
    for name, _, args in (
        part.partition(":") for part in os.environ.get("CREWLET_FAULT_HOOKS", "").split(";")
    )
    if name
}

if "memory_hydrate" in _HOOKS:
    import shared.memory as _memory

    _seats = _HOOKS["memory_hydrate"]
    _replay = _memory.hydrate_scratch

    async def _faulty_replay(js: Any, handle: str, **kw: Any) -> Any:
        if handle in _seats:
            raise _memory.HydrationFailed("fault", "the memory_hydrate fault hook")
        return await _replay(js, handle, **kw)

    _memory.hydrate_scratch = _faulty_replay  # type: ignore[assignment]
