"""Bring one Namespace's or Topic's policies on the broker in line with its spec.

Why read before writing: the drift timer calls this every interval, and a steady state must cost
only GETs — no POST, no event, no condition change. A policy the spec no longer mentions but the
operator set before (status.appliedPolicies) is removed, so the broker default applies again; a
policy the operator never set is left alone, it may belong to someone else.

Three ways a policy can fail to take effect, each reported differently in PoliciesApplied:
- rejected: the broker answered 400/412; its reason goes into the message;
- not stored: the broker accepted the POST but reads back something else (a feature it does not
  have yet, e.g. a backlog quota type it ignores);
- not enforced: stored, but listed in the broker's `unenforced` policies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .admin import InvalidRequest, NotFound, PreconditionFailed
from .conditions import POLICIES, Condition
from .policies import Policy, matches, not_enforced

# The names the broker has reported as stored-but-not-enforced, learned from any namespace document.
# The set is a property of the broker build, not of one namespace, and the topic-level API has no
# `unenforced` list of its own: a topic override is judged by what the namespaces have shown.
_learned_unenforced: set[str] = set()

Reader = Callable[[list[str]], Awaitable[dict[str, Any]]]
Setter = Callable[[Policy], Awaitable[None]]
Remover = Callable[[str], Awaitable[None]]


@dataclass
class PolicyResult:
    applied: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)
    not_stored: list[str] = field(default_factory=list)
    not_enforced: list[str] = field(default_factory=list)

    def condition(self) -> Condition:
        if self.rejected:
            text = "; ".join(f"{f}: {why}" for f, why in sorted(self.rejected.items()))
            return Condition(POLICIES, False, "Rejected", f"the broker refused {text}")
        parts = []
        if self.not_stored:
            parts.append(
                "accepted but not stored by the broker (feature not available yet): " + ", ".join(self.not_stored)
            )
        if self.not_enforced:
            parts.append("stored on the broker but not enforced yet: " + ", ".join(self.not_enforced))
        if parts:
            return Condition(POLICIES, False, "NotApplied", "; ".join(parts))
        if not self.applied:
            return Condition(POLICIES, True, "BrokerDefaults", "no policies set; the broker's defaults apply")
        return Condition(POLICIES, True, "Applied", "applied: " + ", ".join(self.applied))

    def status(self) -> dict[str, Any]:
        return {
            "appliedPolicies": self.applied,
            "notApplied": sorted({*self.rejected, *self.not_stored, *self.not_enforced}),
        }


async def sync(
    wanted: Mapping[str, Policy],
    previously_applied: Iterable[str],
    *,
    read: Reader,
    set_policy: Setter,
    remove: Remover,
    unenforced: Callable[[], list[str] | None],
    previously_not_stored: Iterable[str] = (),
) -> PolicyResult:
    """Set what differs, remove what the spec dropped, read back, and classify the outcome."""
    result = PolicyResult()
    dropped = [f for f in previously_applied if f not in wanted]
    current = await read(sorted({*wanted, *dropped}))
    to_set = [f for f, p in wanted.items() if not matches(p.body, current.get(f))]
    for name in to_set:
        try:
            await set_policy(wanted[name])
        except (InvalidRequest, PreconditionFailed) as exc:
            result.rejected[name] = exc.reason
    for name in dropped:
        if current.get(name) is None:
            continue
        try:
            await remove(name)
        except NotFound:
            continue
        result.changes.append(f"removed {name}")
    written = [f for f in to_set if f not in result.rejected]
    if written:
        after = await read(written)
        result.not_stored = [f for f in written if not matches(wanted[f].body, after.get(f))]
    # A policy the broker cannot store is retried every pass; only its first failure is news.
    repeat = set(previously_not_stored)
    for name in written:
        if name not in result.not_stored:
            result.changes.append(f"set {name}")
        elif name not in repeat:
            result.changes.append(f"tried to set {name}")
    result.applied = [f for f in wanted if f not in result.rejected and f not in result.not_stored]
    # Asked last: the broker lists only policies that are set, so the read-back knows best.
    _learned_unenforced.update(unenforced() or [])
    result.not_enforced = not_enforced(result.applied, sorted(_learned_unenforced))
    return result
