"""What an activated revision changes on this node: the apply (FL-108, FL-110, FL-114..FL-116, CO-4).

:class:`NodeApplier` is the reconciler's ``apply`` callback. Stages, in order, reported as
``applied_subsystems`` (FL-114):

1. ``secrets``: the secret store is re-read (FL-115: an apply re-reads it first, so re-activating an
   unchanged revision picks up a rotation); ``${NAME}`` resolves from the store first, then the
   process environment (FL-151, CO-5);
2. ``company``: the document is validated (a revision that is not a runnable company is refused,
   every error named) and resolved; the org model is built;
3. ``tools``: each role's ``prepare`` builds what can fail — the seats role's provider clients; a
   provider that cannot be constructed for a reason other than an unset secret refuses the apply;
4. ``mailboxes``: every agent seat's mailbox is created before anything can publish to it (FL-78);
5. ``epoch``: the swap — ``ctx.company``, ``ctx.resolved``, ``ctx.org`` and the applied epoch are
   replaced together. Nothing before it mutated the running company, so a failure up to here is
   status ``error`` and the previous epoch keeps running (FL-111);
6. each role's ``apply``: ``tracker_projects`` and ``knowledge_containers`` (data), ``seat_identities``
   and ``seat_tools`` (seats: new turn engine, seat set, placement), ``scheduler`` (workers); a
   failure here is ``degraded``;
7. ``published``.

Turns pin their company (FL-116): a turn takes the turn engine once at its start, and an apply
builds a new engine beside it instead of mutating the old one; the old provider clients close
once no turn started before the swap is still running.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from shared import logs
from shared.config import ConfigInvalid, OrgModel, inert_paths, resolve_secrets, validate_company_data
from shared.control import Activation, ApplyOutcome
from shared.runtime import CompanySnapshot, NodeContext, RoleService

__all__ = ["NodeApplier"]

_log = logs.get("control.apply")


class NodeApplier:
    """Applies activated revisions to one node (see the module docstring).

    Args:
        ctx: The node context.
        roles: The node's role services, in boot order.
    """

    def __init__(self, ctx: NodeContext, roles: list[RoleService]) -> None:
        self.ctx = ctx
        self.roles = roles

    async def _environment(self) -> tuple[dict[str, str], list[str]]:
        """The lookup for ``${NAME}``: the secret store over the process environment (FL-151)."""
        env = dict(os.environ)
        values: list[str] = []
        store = self.ctx.extras.get("secret_store")
        if store is not None:
            resolved, _unopenable = await store.resolve()
            env.update(resolved)
            values = [v for v in resolved.values() if v]
        return env, values

    async def __call__(self, act: Activation) -> ApplyOutcome:
        """Apply ``act``; never raises (a failure is the outcome's ``status`` and ``error``)."""
        ctx = self.ctx
        stages: list[str] = []
        revision = act.revision
        try:
            env, store_values = await self._environment()
        except Exception as e:  # noqa: BLE001 - the store did not answer: nothing changed
            return ApplyOutcome("error", f"secret store: {type(e).__name__}: {e}", stages)
        stages.append("secrets")
        company, issues = validate_company_data(
            revision.document, file=f"revision {revision.revision_id}", compat=revision.compat
        )
        if company is None:
            lines = [i.line() for i in issues if i.severity == "error"]
            return ApplyOutcome("error", "\n".join(lines), stages)
        try:
            resolved, unresolved = resolve_secrets(company, env)
        except ConfigInvalid as e:
            return ApplyOutcome("error", "\n".join(i.line() for i in e.issues), stages)
        for path, name in unresolved:
            _log.warning("secret_unresolved", name=name, path=path)
        org = OrgModel.from_company(resolved)
        stages.append("company")
        secret_values = {*store_values, *_literal_credentials(resolved)}
        snap = CompanySnapshot(
            company=company,
            resolved=resolved,
            org=org,
            epoch=act.epoch,
            revision_id=revision.revision_id,
            base_dir=Path(ctx.extras.get("company_dir", ".")),
            secret_values=tuple(sorted(v for v in secret_values if v)),
        )
        prepared: dict[str, Any] = {}
        try:
            for role in self.roles:
                if role.prepare is not None:
                    prepared[role.name] = await role.prepare(ctx, snap)
        except Exception as e:  # noqa: BLE001 - refused before the swap: the old epoch runs on
            await self._discard(prepared)
            return ApplyOutcome("error", _message(e), stages)
        stages.append("tools")
        bus = ctx.extras.get("bus")
        if bus is not None and org.seats:
            try:
                await bus.ensure_mailboxes([s.handle for s in org.seats])
            except Exception as e:  # noqa: BLE001
                await self._discard(prepared)
                return ApplyOutcome("error", f"mailboxes: {_message(e)}", stages)
            stages.append("mailboxes")
        for path in inert_paths(company):
            _log.info("feature_inert", path=path)
        ctx.company, ctx.resolved, ctx.org = company, resolved, org
        ctx.extras["snapshot"] = snap
        ctx.extras["applied_epoch"] = act.epoch
        ctx.extras["applied_revision"] = revision.revision_id
        ctx.extras["activated_at"] = act.activated_at
        stages.append("epoch")
        for role in self.roles:
            if role.apply is None:
                continue
            try:
                stages.extend(await role.apply(ctx, snap, prepared.get(role.name)))
            except Exception as e:  # noqa: BLE001 - after the swap: degraded, never converged
                _log.error("config_apply_degraded", role=role.name, error=_message(e))
                return ApplyOutcome("degraded", f"{role.name}: {_message(e)}", stages)
        stages.append("published")
        return ApplyOutcome("ok", "", stages)

    async def _discard(self, prepared: dict[str, Any]) -> None:
        for value in prepared.values():
            close = getattr(value, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception as e:  # noqa: BLE001
                    _log.warning("config_prepared_close_failed", error=_message(e))


def _message(e: BaseException) -> str:
    return str(e) or type(e).__name__


def _literal_credentials(company: Any) -> list[str]:
    """Resolved credential values of a company, to redact from recorded prompts."""
    out: list[str] = []
    for entry in company.providers.llm.values():
        out += [k for k in entry.api_keys if k]
    out += [w.secret for w in company.integrations.webhooks if w.secret]
    return out
