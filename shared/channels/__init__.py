"""Channels seam: agent-to-agent asks (CO-36, FL-124, FL-99).

A seat asks a colleague with the ``a2a_ask`` tool (:mod:`shared.tools`): :func:`ask` opens a
:class:`Channel` row in the coordination store's ``channels`` slot and wakes the target with
``a2a_request`` one delegation hop deeper; once the target's turn commits, :func:`answer` posts its
final artifact on the channel, closes it and wakes the asker with ``a2a_message``.
:func:`sweep_channels` is the maintenance tick's part: idle channels close after
:data:`IDLE_CLOSE`, closed rows go after :data:`CLOSED_RETENTION`. The dispatcher binds an
:class:`AskScope` around each turn (:func:`bind`) so the tool can reach the bus and the store.

.. versionadded:: 0.1 (issue 14, CO-36)
"""

from ._ask import SOURCE, answer, answer_envelope, ask, request_envelope
from ._errors import ChannelError, ChannelRecordInvalid
from ._record import (
    Channel,
    ChannelStatus,
    CloseReason,
    channel_id_for,
    close_channel,
    get_channel,
    list_channels,
    open_channel,
    rfc3339,
)
from ._scope import AskScope, bind, current
from ._sweep import CLOSED_RETENTION, IDLE_CLOSE, SweepReport, sweep_channels

__all__ = [
    "CLOSED_RETENTION",
    "IDLE_CLOSE",
    "SOURCE",
    "AskScope",
    "Channel",
    "ChannelError",
    "ChannelRecordInvalid",
    "ChannelStatus",
    "CloseReason",
    "SweepReport",
    "answer",
    "answer_envelope",
    "ask",
    "bind",
    "channel_id_for",
    "close_channel",
    "current",
    "get_channel",
    "list_channels",
    "open_channel",
    "request_envelope",
    "rfc3339",
    "sweep_channels",
]
