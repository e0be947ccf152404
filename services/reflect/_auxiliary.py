"""The seat's auxiliary model, as the reflect workers call it (AG-3, AG-5, AG-6; CO-30).

A seat has an auxiliary model when its role names one (``llm: {auxiliary: <key or keys>}``); with
none, the workers that need one skip (``no_auxiliary_model``, as the learning duty does, AG-15).
Every call is charged to the seat: reserved on its budgets before it runs and settled to the real
count after (CO-37), and reported as an ``auxiliary_call_completed`` event with ``phase:
auxiliary`` and ``worker`` = the calling worker's name (CO-22). The provider clients are built
from the node's applied company snapshot, once per epoch.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from shared import config, logs, providers
from shared.budgets import Budgets
from shared.config import Seat
from shared.providers import ChatRequest, UserMessage

__all__ = ["Auxiliary", "auxiliary_keys"]

_log = logs.get("reflect")


def auxiliary_keys(seat: Seat) -> tuple[str, ...]:
    """The provider keys of the seat's auxiliary model: ``llm.auxiliary`` of its role; () for none."""
    llm = seat.role.llm
    selected = llm.auxiliary if isinstance(llm, config.LlmPhases) else None
    if isinstance(selected, str):
        return (selected,)
    if isinstance(selected, list):
        return tuple(selected)
    return ()


class Auxiliary:
    """Auxiliary model calls on one node, charged to the seat.

    Args:
        snapshot: The node's applied company snapshot (``ctx.extras["snapshot"]``), or None.
        budgets: The node's budgets (CO-37), or None to charge nothing.
        emit: Records an event this node published (``crewlet.custody.emit_event`` bound to the node).
        node_id: This node.
    """

    def __init__(
        self,
        snapshot: Callable[[], Any],
        *,
        budgets: Budgets | None,
        emit: Callable[[dict[str, Any]], None],
        node_id: str,
    ) -> None:
        self._snapshot = snapshot
        self._budgets = budgets
        self._emit = emit
        self._node = node_id
        self._set: providers.ProviderSet | None = None
        self._epoch: int | None = None
        self._retired: list[providers.ProviderSet] = []

    def _providers(self) -> providers.ProviderSet | None:
        snap = self._snapshot()
        if snap is None:
            return None
        if self._set is None or self._epoch != snap.epoch:
            old = self._set
            self._set = providers.build_providers(snap.resolved, base_dir=snap.base_dir)
            self._epoch = snap.epoch
            if old is not None:
                self._retired.append(old)
        return self._set

    async def ask(
        self, seat: Seat, worker: str, system: str, user: str, *, max_tokens: int = 400
    ) -> str | None:
        """Ask the seat's auxiliary model once; its text, or None when the seat has none.

        Raises:
            BudgetExhausted: the seat (or the org) is at its ceiling.
            LLMError: every entry of the chain failed.
        """
        keys = auxiliary_keys(seat)
        provs = self._providers() if keys else None
        if provs is None:
            return None
        estimate = (len(system) + len(user)) // 4 + max_tokens
        charge = await self._budgets.charge(seat.agent_id, estimate) if self._budgets is not None else None
        spent = 0
        try:
            request = ChatRequest(system, (UserMessage(user),), max_output_tokens=max_tokens)
            answer = await provs.chain(keys).complete(request)
            spent = answer.input_tokens + answer.output_tokens
        finally:
            if charge is not None and self._budgets is not None:
                await self._budgets.settle(charge, spent)
        self._report(seat, worker, answer)
        return answer.text

    def _report(self, seat: Seat, worker: str, answer: Any) -> None:
        now = time.time()
        data = {
            "seat": seat.handle,
            "phase": "auxiliary",
            "worker": worker,
            "provider_key": answer.provider_key,
            "model": answer.model,
            "tokens": {"input": answer.input_tokens, "output": answer.output_tokens},
            "node": self._node,
        }
        _log.info(
            "auxiliary_call_completed",
            **{k: v for k, v in data.items() if k != "tokens"},
            input_tokens=answer.input_tokens,
            output_tokens=answer.output_tokens,
        )
        self._emit(
            {
                "event_time": int(now * 1_000_000),
                "event_id": f"auxiliary.{uuid.uuid4()}",
                "event_type": "auxiliary_call_completed",
                "source": self._node,
                "category": "turns",
                "agent_id": seat.handle,
                "data": data,
                "parties": {seat.handle: "seat"},
            }
        )

    async def aclose(self) -> None:
        """Close the provider clients this node built."""
        for provs in [*self._retired, *([self._set] if self._set is not None else [])]:
            await provs.aclose()
        self._retired.clear()
        self._set = None
