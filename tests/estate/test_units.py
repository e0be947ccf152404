"""Unit checks of the estate's names and envelopes (ES-5, ES-6, ES-22, ES-38, ES-46, ES-60, CO-26)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from shared import estate, router
from shared.estate import Answer, Call, Position, Record


def test_op_ids_sort_by_instant_and_parse_back() -> None:
    a = estate.mint_op_id("update-ENG-4", at_ms=1_732_870_000_000)
    b = estate.mint_op_id("update-ENG-4", at_ms=1_732_870_000_001)
    assert a < b
    assert estate.op_id_instant(a) == 1_732_870_000_000
    assert a.endswith(".update-ENG-4") and len(a.encode()) <= 128
    assert estate.validate_op_id(a) == a
    long = estate.mint_op_id("x" * 400)
    assert len(long.encode()) <= 128 and estate.validate_op_id(long)


def test_hand_made_op_id_is_refused() -> None:
    with pytest.raises(estate.InvalidField) as e:
        estate.validate_op_id("retry-me-please")
    assert e.value.field == "op_id" and "op_id_invalid" in str(e.value)
    with pytest.raises(estate.InvalidField):
        estate.validate_op_id("01a22681-0f57-72b6-86e3-f035a8dc64fc.with space")


def test_derived_op_ids_are_stable_across_processes() -> None:
    here = estate.derive_op_id("seed-project-ENG", "name=Engineering")
    code = "from shared import estate; print(estate.derive_op_id('seed-project-ENG', 'name=Engineering'))"
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert here == there
    assert here != estate.derive_op_id("seed-project-ENG", "name=Other")


def test_position_tokens_round_trip_and_wrong_stream() -> None:
    for seq in (0, 1, 17, 2**40):
        p = Position("CREWLET_TRACKER_LOG", 1, seq)
        assert Position.parse(p.token()) == p
    with pytest.raises(estate.WrongStream) as e:
        Position.parse("CREWLET_PAGES_LOG@1:4", domain="tracker")
    assert e.value.field == "min_position" and e.value.code == "wrong_stream"
    with pytest.raises(estate.InvalidField):
        Position.parse("TRACKER:4")


def test_search_bucket_is_stable_and_in_range() -> None:
    ids = [f"doc-{i}" for i in range(2000)]
    buckets = [estate.search_bucket(i) for i in ids]
    assert all(0 <= b < 64 for b in buckets)
    assert len(set(buckets)) == 64
    code = "from shared import estate; print(estate.search_bucket('doc-7'))"
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert int(there) == estate.search_bucket("doc-7")


def test_append_refuses_a_record_naming_no_writer_or_generation() -> None:
    base = dict(
        kind="task_update", domain="tracker", subject="crewlet.statelog.tracker.obj.task.x", op_id="o", at=1
    )
    with pytest.raises(estate.InvalidField) as e:
        Record(writer="", generation=1, **base).encode()  # type: ignore[arg-type]
    assert e.value.field == "writer"
    with pytest.raises(estate.InvalidField) as e:
        Record(writer="n1", generation=0, **base).encode()  # type: ignore[arg-type]
    assert e.value.field == "generation"
    rec = Record(writer="n1", generation=1, **base)  # type: ignore[arg-type]
    assert json.loads(rec.encode())["v"] == 1 and Record.decode(rec.encode()) == rec


def test_wire_round_trips_every_reply_kind() -> None:
    answers = [
        Answer(
            status="ran", node="n1", positions={"CREWLET_TRACKER_LOG": 3}, result={"data": [1], "meta": {}}
        ),
        Answer(status="ran", node="n1", error=estate.to_wire(estate.VersionConflict("stale", 4))),
        Answer(
            status="ran_nothing", node="n2", reason="lagging", detail="1500 records behind", retry_after=1.0
        ),
        Answer(status="unvouched", node="n3", error=estate.to_wire(estate.OutcomeUnknown("op", "lost"))),
    ]
    for a in answers:
        assert router.decode_answer(router.encode_answer(a, limit=1 << 20)) == a
    call = Call(
        op="work.list",
        args={"project": "ENG"},
        floors={"CREWLET_TRACKER_LOG": 9},
        read_level="session",
        min_position="CREWLET_TRACKER_LOG@1:9",
        deadline=12.5,
        take_anyway=True,
        asker="n1",
    )
    assert router.decode_call(router.encode_call(call)) == call
    big = Answer(status="ran", node="n1", result="x" * 5000)
    refused = router.decode_answer(router.encode_answer(big, limit=1000))
    assert (
        refused.error is not None
        and refused.error["code"] == "too_large"
        and refused.error["field"] == "answer"
    )


def test_unknown_protocol_version_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="protocol version 99"):
        router.decode_call(json.dumps({"v": 99, "op": "work.list"}).encode())


def test_errors_cross_the_wire_unchanged() -> None:
    errs: list[estate.EstateError] = [
        estate.NotFound("project", "NOPE"),
        estate.InvalidField("path", "leaves its project"),
        estate.VersionConflict("ENG-1 is at version 3", 3),
        estate.OpReused("op", "CREWLET_TRACKER_LOG@1:4", "task:x"),
        estate.TooLarge("body", 10, 11),
        estate.Refused("behind", "short", retry_after=1.0, node="n2"),
        estate.OutcomeUnknown("op", "lost"),
    ]
    for err in errs:
        back = estate.from_wire(estate.to_wire(err))
        assert type(back) is type(err) and str(back) == str(err) and back.wire() == err.wire()
    assert estate.Refused("behind", "x").retryable and not estate.Refused("evicted", "x").retryable
    assert not estate.NotFound("project", "X").retryable


@pytest.mark.parametrize(
    "path", ["../etc/passwd", "/abs/file", "a/../../b", "a//b", "a\\b", "./a", "", "x" * 513]
)
def test_file_paths_that_leave_their_project_are_refused(path: str) -> None:
    with pytest.raises(estate.InvalidField) as e:
        estate.validate_path(path)
    assert e.value.field == "path"


def test_good_file_paths_pass() -> None:
    for p in ("README.md", "docs/guide/intro.md", "a b/c-d_e.txt"):
        assert estate.validate_path(p) == p
    assert estate.object_key_for("ab" + "0" * 62) == "sha256/ab/ab" + "0" * 62


ESTATE_API = {
    "Answer",
    # issue 14: a message's reply comment is cut to fit (CO-8)
    "COMMENT_LIMIT",
    # issue 12: the divided search (ES-62..ES-64)
    "DIVIDE_AT",
    "SLICE_WAIT",
    "DividedSearch",
    "SliceResponder",
    "assign",
    "merge_hits",
    "slice_subject",
    # issue 11: the trim, the sweeps, backups
    "BackupAgeWatch",
    "BackupFailed",
    "take_backup",
    "LedgerSweeper",
    "TERMS",
    "TrimConclusion",
    "conclude",
    "record_watermark",
    "sweep_ledger",
    "Applier",
    "ApplyOutcome",
    "BUCKETS",
    "Call",
    "CopyState",
    "DOMAINS",
    "DecideCtx",
    "Decision",
    "Domain",
    "EVENT_LIMIT",
    "Estate",
    "EstateError",
    "EstateService",
    "EstateServiceError",
    "EstateStore",
    "EstateUsageError",
    "EventLog",
    "Fenced",
    "InvalidField",
    "MAX_FILE",
    "NotFound",
    "OPS",
    "OpReused",
    "OutcomeUnknown",
    "PAGE_LIMIT",
    "PROTOCOL",
    "Position",
    "RETRY_HERE",
    "ReadLevel",
    "Record",
    "Refused",
    "Rules",
    "STREAMS",
    "StateLog",
    "StoreFailed",
    "TRACE_LIMIT",
    "TooLarge",
    "VersionConflict",
    "WrongStream",
    "company_seed",
    "derive_op_id",
    "from_wire",
    "mint_op_id",
    "object_key_for",
    "object_subject",
    "op_id_instant",
    "open_estate",
    "rules_from_company",
    "search_bucket",
    "to_wire",
    "validate_op_id",
    "validate_path",
}
ROUTER_API = {
    "AnswerTooLarge",
    "EstateCalls",
    "EstateRouter",
    "LocalEstate",
    "NobodyAnswered",
    "NodeReply",
    "READ_WAIT",
    "RouterError",
    "RpcServer",
    "SeatCalls",
    "SILENT_DEMOTION",
    "WRITE_WAIT",
    "decode_answer",
    "decode_call",
    "encode_answer",
    "encode_call",
    "failed_search",
    "open_router",
    "router_of",
    "rpc_subject",
}


def test_public_names_are_pinned() -> None:
    assert set(estate.__all__) == ESTATE_API
    assert set(router.__all__) == ROUTER_API
    for mod in (estate, router):
        for name in mod.__all__:
            assert hasattr(mod, name), name
