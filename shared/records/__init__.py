"""Records seam: the node's own turn history in ``node.db`` (CO-20, CO-22)."""

from ._store import TurnStore, abandoned_note, prune_turns

__all__ = ["TurnStore", "abandoned_note", "prune_turns"]
