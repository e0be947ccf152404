"""The channels seam's public names are pinned (STYLE: ``__all__`` is tested)."""

from __future__ import annotations

import shared.channels as channels
from services.seats import asks


def test_public_names() -> None:
    assert sorted(channels.__all__) == sorted(
        [
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
    )
    for name in channels.__all__:
        assert hasattr(channels, name), name
    assert sorted(asks.__all__) == ["admit", "answered", "bound", "reply_of"]
