"""A turn that settles while the broker is paused is still published for reflection (AG-2's Check,
AG-6): ``agent_turn_completed`` is retried until the broker answers again, on a real nats-server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from datetime import timedelta
from typing import Any

import nats
import pytest

from crewlet.custody import publish_with_retry
from shared.bus import Bus
from shared.turns._completed import COMPLETED_SUBJECT

pytestmark = pytest.mark.asyncio


async def test_a_publish_during_a_broker_pause_lands_after_it(nats_server: Any) -> None:
    nc = await nats.connect(nats_server.url, name="holder")
    try:
        js = nc.jetstream(timeout=5.0)
        bus = Bus(nc, js, fence=lambda h, e: False, ack_wait=timedelta(seconds=30), max_deliver=5)
        await bus.provision()
        body = json.dumps({"turn_id": "t-paused", "outcome": "done"}).encode()
        os.kill(nats_server.pid, signal.SIGSTOP)  # the broker pauses as the turn settles
        try:
            task = asyncio.create_task(
                publish_with_retry(js, COMPLETED_SUBJECT, body, "agent_turn_completed.t-paused", retry_for=60)
            )
            await asyncio.sleep(5.0)  # the first attempt times out (5 s) while the broker is stopped
        finally:
            os.kill(nats_server.pid, signal.SIGCONT)
        assert await asyncio.wait_for(task, 35.0) is True
        msg = await js.get_last_msg("CREWLET_EVENTS", COMPLETED_SUBJECT)
        assert json.loads(msg.data or b"{}")["turn_id"] == "t-paused"
        # a repeat of the same turn's publish inside the window is a duplicate the broker drops
        ack = await js.publish(
            COMPLETED_SUBJECT, body, headers={"Nats-Msg-Id": "agent_turn_completed.t-paused"}
        )
        assert ack.duplicate
    finally:
        await nc.close()
