"""The state logs on JetStream: provisioning (ES-4) and appending (ES-10, ES-11, ES-26).

Every nats-py error is translated here; nothing above this module imports nats errors.

An append carries ``Nats-Msg-Id = op_id`` (the broker collapses a repeat inside its 2-minute
duplicate window) and, unless the kind is additive, ``Nats-Expected-Last-Subject-Sequence`` =
the anchor: the last record this copy consumed on that subject (ES-10). The broker checks the
expectation before the duplicate window, so a repeat of an op that already landed comes back as a
subject conflict; the write path then applies up to the subject's head and finds the op in its ledger.

Infra facts this module is shaped by (spec/infra-facts.md): a timed-out publish may have landed
(§3); during an election every call fails at once with "no responders" (N14); without quorum a
subject expectation answers 10164 "wrong last sequence" with no number, which is *not* a conflict (N1).
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js import api as jsapi

from shared import logs

from .._errors import Refused
from ._ids import STREAMS, barrier_subject, is_compacted, stream_subject_filters
from ._record import MAX_RECORD, Record

__all__ = ["AppendConflict", "AppendUnanswered", "StateLog", "StreamFacts"]

_log = logs.get("statelog")
_SLOW_AFTER = 10.0
_WRONG_LAST = re.compile(r"wrong last sequence: (\d+)")


@dataclass(frozen=True)
class StreamFacts:
    """What a booting node learnt about one log stream.

    Attributes:
        name: The stream name.
        created_at: The stream's creation instant, unix microseconds (ES-16, ES-90).
        replicas: Its replica count as configured on the broker.
        created: True when this node created it.
    """

    name: str
    created_at: int
    replicas: int
    created: bool


class AppendConflict(Exception):
    """The subject's last sequence is not the expected one (10071): another record landed first.

    Attributes:
        last_seq: The subject's current last sequence as the broker said, or None when unknown.
    """

    def __init__(self, last_seq: int | None) -> None:
        self.last_seq = last_seq
        super().__init__(f"wrong last subject sequence (now {last_seq})")


class AppendUnanswered(Exception):
    """The append was sent and no answer came back (or the broker was mid-proposal, 10164): it may have landed."""


def _micros(dt: datetime | None) -> int:
    return int(dt.timestamp() * 1_000_000) if dt is not None else 0


def _config(domain: str, replicas: int) -> jsapi.StreamConfig:
    base: dict[str, Any] = dict(
        name=STREAMS[domain],
        subjects=stream_subject_filters(domain),
        retention=jsapi.RetentionPolicy.LIMITS,
        storage=jsapi.StorageType.FILE,
        num_replicas=replicas,
        duplicate_window=120.0,
        discard=jsapi.DiscardPolicy.NEW,
        max_msg_size=MAX_RECORD,
        allow_direct=True,
    )
    if domain == "vectors":
        return jsapi.StreamConfig(**base, max_msgs_per_subject=1, max_age=90 * 86400.0)
    if is_compacted(domain):  # usage (ES-69), memory (AG-1) and any compacted log a domain registers
        return jsapi.StreamConfig(**base, max_msgs_per_subject=1)
    return jsapi.StreamConfig(**base)


class StateLog:
    """The ordered logs of one process's connection.

    Args:
        js: The JetStream context of the node's one connection (``ctx.link.js``).
        replicas: ``stream.replicas`` (3 in a fleet; at most 5).
        timeout: Seconds one broker call may take before it counts as unanswered.
    """

    def __init__(self, js: JetStreamContext, *, replicas: int = 1, timeout: float = 2.0) -> None:
        self._js = js
        self._replicas = min(max(replicas, 1), 5)
        self._timeout = timeout

    async def provision(self, *, budget: float | None = None) -> dict[str, StreamFacts]:
        """Create or adopt every log stream (ES-4, amended by AG §13: five with ``memory``); an
        existing stream is never rewritten.

        Args:
            budget: Seconds per stream; default 120 with replicas, else 30. One WARN
                ``jetstream_stream_slow`` past 10 s.

        Returns:
            Log → facts, for every log of :data:`STREAMS` (``tracker``, ``pages``, ``vectors``, ``usage``
                and the logs registered domains own).

        Raises:
            Refused: ``broker_unreachable`` when a stream could not be created or read in the budget.
        """
        per = budget if budget is not None else (120.0 if self._replicas > 1 else 30.0)
        domains = list(STREAMS)
        facts = await asyncio.gather(*(self._ensure(d, per) for d in domains))
        return dict(zip(domains, facts, strict=True))

    async def _ensure(self, domain: str, budget: float) -> StreamFacts:
        name = STREAMS[domain]
        start = time.monotonic()
        slow_logged = False
        while True:
            try:
                info = await self._js.stream_info(name)
                return StreamFacts(name, _micros(info.created), info.config.num_replicas or 1, False)
            except nats.js.errors.NotFoundError:
                try:
                    info = await self._js.add_stream(_config(domain, self._replicas))
                    _log.info("jetstream_stream_created", stream=name, replicas=self._replicas)
                    return StreamFacts(name, _micros(info.created), self._replicas, True)
                except nats.js.errors.BadRequestError as e:
                    if e.err_code != 10058:  # 10058: created meanwhile by a peer; adopt it next lap
                        raise Refused("broker_unreachable", f"creating {name}: {e.description}") from None
                except (
                    nats.errors.TimeoutError,
                    nats.js.errors.NoStreamResponseError,
                    nats.errors.NoRespondersError,
                ):
                    pass
                except nats.js.errors.APIError as e:
                    if e.err_code != 10005:  # 10005: not enough peers yet (a cluster still forming)
                        raise Refused("broker_unreachable", f"creating {name}: {e.description}") from None
            except (
                nats.errors.TimeoutError,
                nats.js.errors.NoStreamResponseError,
                nats.errors.NoRespondersError,
                nats.js.errors.ServiceUnavailableError,
            ):
                pass
            elapsed = time.monotonic() - start
            if elapsed > _SLOW_AFTER and not slow_logged:
                _log.warning("jetstream_stream_slow", stream=name, elapsed_ms=int(elapsed * 1000))
                slow_logged = True
            if elapsed > budget:
                raise Refused(
                    "broker_unreachable", f"stream {name} could not be created within {budget:.0f} s"
                )
            await asyncio.sleep(0.25)

    async def append(self, record: Record, *, expect: int | None) -> tuple[int, bool]:
        """Publish ``record`` with its op id as message id and the subject expectation.

        Args:
            record: The record (encoded here: ES-5 refusals raise before anything is sent).
            expect: The expected last sequence on ``record.subject`` (0 = no record yet), or None
                for additive kinds that take no expectation.

        Returns:
            ``(seq, duplicate)``: the sequence it landed at; ``duplicate`` is True when the broker
            collapsed it onto an earlier record with the same op id (that record's sequence).

        Raises:
            AppendConflict: the subject moved past ``expect`` (10071).
            AppendUnanswered: sent and not answered, or the broker was mid-proposal (10164).
            Refused: nothing was stored: ``no_quorum`` (no responders: an election), ``log_full``,
                ``broker_unreachable`` (disconnected).
            InvalidField, TooLarge: the record is malformed (ES-5).
        """
        raw = record.encode()
        headers = {"Nats-Msg-Id": record.op_id}
        if expect is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(expect)
        try:
            ack = await self._js.publish(
                record.subject, raw, timeout=self._timeout, headers=headers, stream=STREAMS[record.domain]
            )
        except nats.js.errors.APIError as e:
            raise self._translate(e) from None
        except (TimeoutError, nats.errors.TimeoutError):
            raise AppendUnanswered(f"no acknowledgement within {self._timeout} s") from None
        except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError):  # N14: an election
            raise Refused(
                "no_quorum", "the log has no leader (an election is running)", retry_after=4.0
            ) from None
        except (
            nats.errors.ConnectionClosedError,
            nats.errors.ConnectionReconnectingError,
            nats.errors.ConnectionDrainingError,
            nats.errors.StaleConnectionError,
            OSError,
        ) as e:
            raise Refused("broker_unreachable", f"{type(e).__name__}", retry_after=1.0) from None
        except nats.errors.Error as e:  # anything else nats-py raises after sending: the fate is unknown
            raise AppendUnanswered(f"{type(e).__name__}: {e}") from None
        return int(ack.seq), bool(ack.duplicate)

    @staticmethod
    def _translate(e: nats.js.errors.APIError) -> Exception:
        if isinstance(e, nats.js.errors.NoStreamResponseError):
            return Refused("no_quorum", "the log has no leader (an election is running)", retry_after=4.0)
        if e.err_code == 10071:
            m = _WRONG_LAST.search(e.description or "")
            return AppendConflict(int(m.group(1)) if m else None)
        if e.err_code == 10164:
            return AppendUnanswered("the log leader holds an uncommitted proposal on this subject (10164)")
        if e.err_code in (10077, 10047, 10028):
            return Refused("log_full", f"the log refuses new records: {e.description}")
        if e.err_code == 10054:
            return Refused("broker_unreachable", f"the log answered {e.description}")
        return Refused("broker_unreachable", f"the broker refused the append: {e.description} ({e.err_code})")

    async def last_on_subject(self, domain: str, subject: str) -> tuple[int, str] | None:
        """Return ``(seq, op_id)`` of the newest record on ``subject`` (read through the leader), or None.

        Raises:
            Refused: ``broker_unreachable`` / ``no_quorum`` when the broker could not be asked.
        """
        msg = await self._last_msg(domain, subject)
        if msg is None:
            return None
        op = (msg.headers or {}).get("Nats-Msg-Id", "")
        return int(msg.seq or 0), str(op)

    async def last_record(self, domain: str, subject: str) -> tuple[int, Record] | None:
        """Return ``(seq, record)`` of the newest record on ``subject`` (read through the leader), or
        None when the subject holds none: what a compare-and-set writer reads first (AG-1).

        Raises:
            Refused: ``broker_unreachable`` / ``no_quorum`` when the broker could not be asked.
            ValueError: the stored bytes are not a record this build reads.
        """
        msg = await self._last_msg(domain, subject)
        return None if msg is None else (int(msg.seq or 0), Record.decode(msg.data or b""))

    async def _last_msg(self, domain: str, subject: str) -> Any:
        """The newest message on ``subject`` or None; every broker failure is a :class:`Refused`."""
        try:
            return await self._js.get_last_msg(STREAMS[domain], subject)
        except nats.js.errors.NotFoundError:
            return None
        except nats.js.errors.NoStreamResponseError:
            raise Refused("no_quorum", "the log has no leader", retry_after=4.0) from None
        except nats.js.errors.APIError as e:
            raise Refused("broker_unreachable", f"reading {subject}: {e.description}") from None
        except (
            TimeoutError,
            nats.errors.TimeoutError,
            nats.errors.NoRespondersError,
            nats.errors.ConnectionClosedError,
            nats.errors.ConnectionReconnectingError,
        ):
            raise Refused("broker_unreachable", f"reading the head of {subject} went unanswered") from None

    async def barrier(self, domain: str, *, op_id: str, writer: str) -> int:
        """Append one barrier record and return its sequence (ES-26: linearizable reads).

        Raises:
            Refused: ``no_quorum``, ``broker_unreachable``, ``log_full`` or ``barrier_refused``.
        """
        rec = Record(
            kind="barrier",
            domain=domain,
            subject=barrier_subject(domain),
            op_id=op_id,
            writer=writer,
            generation=1,
            at=int(time.time() * 1_000_000),
        )
        try:
            seq, _ = await self.append(rec, expect=None)
        except AppendConflict as e:  # cannot happen without an expectation
            raise Refused("barrier_refused", str(e)) from None
        except AppendUnanswered as e:
            raise Refused("no_quorum", f"the barrier was not acknowledged: {e}", retry_after=4.0) from None
        return seq

    async def head(self, domain: str) -> tuple[int, int]:
        """Return ``(first_seq, last_seq)`` of ``domain``'s log.

        Raises:
            Refused: ``broker_unreachable`` when the stream could not be read.
        """
        try:
            info = await self._js.stream_info(STREAMS[domain])
        except (
            TimeoutError,
            nats.js.errors.NoStreamResponseError,
            nats.js.errors.APIError,
            nats.errors.TimeoutError,
            nats.errors.NoRespondersError,
            nats.errors.ConnectionClosedError,
            nats.errors.ConnectionReconnectingError,
        ) as e:
            raise Refused("broker_unreachable", f"reading {STREAMS[domain]}: {type(e).__name__}") from None
        return int(info.state.first_seq), int(info.state.last_seq)
