"""The company ``learning`` block (AG-3..AG-6, AG-15; agent.md section 13.9): the reflect pass, the
profiler and the learning passes' settings, every switch on by default."""

from __future__ import annotations

from pydantic import Field

from ._company_types import StrictModel as _Model

__all__ = ["Learning", "LearningCounterparty", "LearningReflect"]


class LearningReflect(_Model):
    """``learning.reflect`` (AG-6, AG-15): the post-turn reflect pass.

    Attributes:
        enabled: False skips the whole pass for every seat (gate ``opted_out``).
        persist_decider: False skips the persist decider (AG-3).
        budget_tokens: Tokens one auxiliary call of the pass may spend (0 = uncapped).
        summarize_episodes: ``query_episodes`` summarises through the auxiliary model (AG-4).
        summarize_max_tokens: The summary's cap, in tokens.
    """

    enabled: bool = True
    persist_decider: bool = True
    budget_tokens: int = Field(5000, ge=0)
    summarize_episodes: bool = True
    summarize_max_tokens: int = Field(400, ge=1)


class LearningCounterparty(_Model):
    """``learning.counterparty`` (AG-5): the profiler.

    Attributes:
        enabled: False skips the profiler.
        budget_tokens: Tokens one profiler call may spend (0 = uncapped).
    """

    enabled: bool = True
    budget_tokens: int = Field(3000, ge=0)


class Learning(_Model):
    """The company ``learning`` block (AG-15, agent.md section 13.9); switches default on.

    The reflect pass reads ``enabled``, ``reflect`` and ``counterparty``; the other sub-blocks
    (key names as upstream's) are accepted as mappings and read by the passes that use them.

    Attributes:
        enabled: False opts every seat out of learning (AG-6 gate ``opted_out``).
        reflect: The reflect pass (AG-6).
        counterparty: The profiler (AG-5).
    """

    enabled: bool = True
    reflect: LearningReflect = Field(default_factory=LearningReflect)
    counterparty: LearningCounterparty = Field(default_factory=LearningCounterparty)
    episodic: dict[str, int] = Field(default_factory=dict)
    personal_memory: dict[str, int] = Field(default_factory=dict)
    skill_synthesis: dict[str, int | float | bool] = Field(default_factory=dict)
    skill_refinement: dict[str, int | float | bool] = Field(default_factory=dict)
    skill_promotion: dict[str, int | float | bool] = Field(default_factory=dict)
    skill_curator: dict[str, int | float | bool] = Field(default_factory=dict)
    episode_lifecycle: dict[str, int | float | bool] = Field(default_factory=dict)
