"""The estate file's framework tables (spec/estate.md §21), as SQLModel classes on a registry of their own.

:class:`EstateModel` is the base every estate table derives from, the framework's here (checkpoint,
anchors, ledger, ledger watermark, gates) and each domain's in its own sub-package
(``shared.estate.domains.<name>._tables``): a table registers on the metadata when its module is
imported, and the store creates, upgrades and digests whatever the metadata holds. Instants are unix
microseconds taken from records, never from a clock (ES-16), so every data node's copy is identical.
Every object row carries ``version`` and ``scoped_through``; indexed documents carry
``search_shard`` (ES-60).

Derived tables (the FTS5 lexical index) are declared as DDL by the domain registry
(:func:`declare_ddl`), run ``IF NOT EXISTS`` at every open, maintained in the same transaction as
the rows, and left out of digest comparisons.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

__all__ = [
    "declare_ddl",
    "schema_ddl",
    "table_of",
    "Anchor",
    "Checkpoint",
    "EstateModel",
    "GateRow",
    "LedgerRow",
    "LedgerWatermark",
    "T_ANCHOR",
    "T_CHECKPOINT",
    "T_GATES",
    "T_LEDGER",
    "T_LEDGER_WATERMARK",
]


class EstateModel(SQLModel, registry=registry()):
    """Base of every estate table (its own metadata, apart from any other SQLModel user)."""


class Checkpoint(EstateModel, table=True):
    """``statelog_checkpoint``: per domain, how far this copy applied (ES-16)."""

    __tablename__ = "statelog_checkpoint"
    domain: str = Field(primary_key=True)
    stream: str
    generation: int = 1
    seq: int = 0
    applied_through: int = 0
    stream_created_at: int = 0
    checkpoint_stored_at: int = 0
    checkpoint_op_id: str = ""
    max_record_version: int = 0
    rule_versions: str = "{}"


class Anchor(EstateModel, table=True):
    """``statelog_anchor``: the last record this copy consumed per subject (ES-10)."""

    __tablename__ = "statelog_anchor"
    domain: str = Field(primary_key=True)
    subject: str = Field(primary_key=True)
    last_consumed_seq: int = 0


class LedgerRow(EstateModel, table=True):
    """``statelog_ledger``: operation id → where it landed and what it did (ES-7).

    ``outcome`` is ``applied``, ``rejected`` or ``existing``; a rejected record's ``error`` holds the
    refusal (JSON, :func:`~shared.estate._errors.to_wire`) every retry is answered with. An
    ``existing`` record is a create that folded onto an object filed earlier in log order (a work
    item whose ``external`` basis another item already holds, CO-35): ``object_id`` stays the op's
    own derived id (ES-7 compares it for ``op_reused``) and ``resolved_to`` names the object the
    answer shows.

    .. versionchanged:: 0.1 ``outcome`` ``existing`` and the ``resolved_to`` column (issue 10).
    """

    __tablename__ = "statelog_ledger"
    domain: str = Field(primary_key=True)
    op_id: str = Field(primary_key=True)
    object_kind: str
    object_id: str
    stream: str
    generation: int = 1
    seq: int
    applied_at: int
    minted_at: int = 0
    outcome: str = "applied"
    error: str = ""
    resolved_to: str = Field(default="", sa_column_kwargs={"server_default": ""})


class LedgerWatermark(EstateModel, table=True):
    """``statelog_ledger_watermark``: per domain, the instant below which ledger rows may be gone (ES-8).

    ``cutoff_instant`` (unix µs) only rises; ``reason`` is ``sweep`` (rows applied before it were
    deleted by the per-node sweep, ES-85) or ``join`` (the copy was adopted from a donor whose
    snapshot lacked a ledger). Node-local, like the ledger rows the sweep removes: left out of
    digest comparisons.

    .. versionadded:: 0.1 issue 11.
    """

    __tablename__ = "statelog_ledger_watermark"
    domain: str = Field(primary_key=True)
    cutoff_instant: int = 0
    reason: str = "sweep"


class GateRow(EstateModel, table=True):
    """``statelog_gates``: one row per applied gate record (ES-51, spec §21).

    Attributes:
        domain: The log it was written on.
        seq: Its sequence on that log.
        node: The node it is about.
        action: ``evict`` or ``readmit``.
        op_id: The record's op id (derived from the gesture).
        gesture: The gesture id the operator's CLI minted (or brought back with ``--op-id``).
        at: The record's instant (unix µs, the writer's clock when it was decided).
        generation: The generation it was decided in.
    """

    __tablename__ = "statelog_gates"

    domain: str = Field(primary_key=True)
    seq: int = Field(primary_key=True)
    node: str = Field(index=True)
    action: str
    op_id: str
    gesture: str = ""
    at: int = 0
    generation: int = 1


def declare_ddl(*statements: str) -> None:
    """Add derived-table DDL (``CREATE ... IF NOT EXISTS``) the store runs at every open, once each.

    The domain registry (:mod:`shared.estate.domains`) declares its domains' :attr:`ddl` here.
    """
    have: list[str] = EstateModel.metadata.info.setdefault("ddl", [])
    have.extend(s for s in statements if s not in have)


def schema_ddl() -> tuple[str, ...]:
    """The derived-table DDL declared so far, in declaration order."""
    return tuple(EstateModel.metadata.info.get("ddl", ()))


def table_of(model: type[EstateModel]) -> Table:
    """The SQLAlchemy table of an estate model."""
    return cast(Table, model.__table__)  # type: ignore[attr-defined]


T_CHECKPOINT = table_of(Checkpoint)
T_ANCHOR = table_of(Anchor)
T_LEDGER = table_of(LedgerRow)
T_LEDGER_WATERMARK = table_of(LedgerWatermark)
T_GATES = table_of(GateRow)
