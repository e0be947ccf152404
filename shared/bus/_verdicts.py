"""The handler verdicts over one drain batch (FL-81, FL-82, CO-38), for :class:`~shared.bus.Mailbox`.

:meth:`Mailbox.process_batch <shared.bus.Mailbox.process_batch>` fetches a batch and hands it here:
the batch is split into groups, each group is one handler call, and its verdict settles every
delivery of the group. Return = ack; an exception = NAK with backoff (dead letter on the last
allowed delivery) and the next group runs; :class:`~shared.bus.Deferred` = this group and every
later one are NAKed at once and fetching pauses, so a refused batch spends one delivery per message
and is never acked (FL-81). Nothing here publishes except a dead letter (FL-67). A batch is settled
through the mailbox's :class:`~shared.bus._settling.Settling` side, so this module never names the
mailbox that fetched it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from shared import logs

from ._delivery import Deferred, Delivery, Grouping, Outcome, RetryLater
from ._errors import MailboxFenced
from ._settling import Settling

__all__ = ["defer", "groups_of", "run_group", "settle"]

_log = logs.get("bus.mailbox")

Handler = Callable[[list[Delivery]], Awaitable[None]]


async def settle(
    box: Settling, batch: list[Delivery], handler: Handler, group: Grouping | None
) -> list[Outcome]:
    """Run ``handler`` once per group of ``batch`` and settle each group by its verdict.

    See :meth:`shared.bus.Mailbox.process_batch` for the verdicts and the outcomes returned.
    """
    groups = groups_of(batch, group)
    outcomes: list[Outcome] = []
    try:
        for i, members in enumerate(groups):
            outcome = await run_group(box, handler, members)
            if outcome == "deferred":
                # this group and every later one: NAK at once, never ack (FL-81)
                nacked = await defer(box, [d for later in groups[i:] for d in later])
                if not nacked:  # all dead-lettered: nothing is left to hand over
                    outcomes += ["dead_lettered"] * (len(groups) - i)
                    return outcomes
                outcomes += ["deferred"] * (len(groups) - i)
                box.pause()
                _log.info(
                    "inbox_deferred",
                    seat=box.handle,
                    epoch=box.epoch,
                    stream_seq=members[0].stream_seq,
                    stream_seqs=[d.stream_seq for g in groups[i:] for d in g],
                )
                return outcomes
            outcomes.append(outcome)
    except MailboxFenced:
        outcomes.append("fenced")
    return outcomes


def groups_of(batch: list[Delivery], group: Grouping | None) -> list[list[Delivery]]:
    """Split ``batch`` with ``group`` (None: one group per delivery).

    A delivery ``group`` leaves out runs alone after the groups; one it repeats, or one that is not
    in the batch, is dropped from the later group. A ``group`` that raises is logged
    ``inbox_grouping_failed`` and the batch runs one delivery per group.
    """
    if group is None:
        return [[d] for d in batch]
    try:
        grouped = [list(members) for members in group(batch)]
    except Exception as e:  # noqa: BLE001 - a broken grouping must not strand the batch (issue 35)
        # one group per delivery: every message still runs and is settled now, rather than left
        # outstanding until the ack wait
        _log.error("inbox_grouping_failed", size=len(batch), error=f"{type(e).__name__}: {e}")
        return [[d] for d in batch]
    mine = {d.stream_seq for d in batch}
    out: list[list[Delivery]] = []
    placed: set[int] = set()
    for members in grouped:
        kept = [d for d in members if d.stream_seq in mine and d.stream_seq not in placed]
        placed.update(d.stream_seq for d in kept)
        if kept:
            out.append(kept)
    out += [[d] for d in batch if d.stream_seq not in placed]
    return out


async def run_group(box: Settling, handler: Handler, group: list[Delivery]) -> Outcome:
    """Run one group and settle it; a deferred group is left for the caller to defer with the rest.

    Raises:
        MailboxFenced: the fence refused an ack, NAK or dead letter (the rest is left unsettled).
        BusUnavailable: the broker could not be told.
    """
    try:
        await handler(group)
    except Deferred:
        return "deferred"
    except Exception as e:  # noqa: BLE001 - a handler failure is a NAK (FL-81)
        lettered = 0
        for d in group:
            if d.num_delivered >= box.max_deliver:
                await box.dead_letter(d, f"{type(e).__name__}: {e}")
                lettered += 1
            else:
                delay = box.backoff(d.num_delivered)
                if isinstance(e, RetryLater) and e.delay is not None:
                    delay = max(delay, e.delay)
                await box.nak(d, delay=delay)
        return "dead_lettered" if lettered == len(group) else "nacked"
    for d in group:
        await box.ack(d)
    return "acked"


async def defer(box: Settling, deliveries: list[Delivery]) -> int:
    """NAK at once (FL-81); a delivery on its last allowed try is dead-lettered instead.

    Returns:
        How many were NAKed (the rest were dead-lettered or already settled).

    Raises:
        MailboxFenced: the fence refused a NAK (the rest is left unsettled).
        BusUnavailable: the broker could not be told.
    """
    nacked = 0
    for d in deliveries:
        if d.settled:
            continue
        if d.num_delivered >= box.max_deliver:  # a NAK would leave it no delivery left
            await box.dead_letter(d, "deferred on its last allowed delivery")
        else:
            await box.nak(d)
            nacked += 1
    return nacked
