"""Whether one schema can read what another wrote, and Pulsar's compatibility strategies on top.

The broker's registry asks two questions (WIRE.md R119, R120): may a producer register a new
version (``check_compatible``), and may a consumer read the versions that exist (``check_reader``).
Both reduce to ``can_read(reader, writer)`` (schema/resolution.py): for AVRO and JSON (whose
definitions are Avro schemas in Pulsar) it applies the schema-resolution rules of the Avro 1.11
specification statically, i.e. "every datum the writer can produce decodes with the reader", which
is what lets a consumer decode each message with the version it was written with into its own
reader schema. The answer is a reason rather than a bool because a refused producer gets
``IncompatibleSchema`` and its user has to know which field broke which strategy against which
version; this module words that reason for the strategy and the version checked.
"""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.protocol.errors import IncompatibleSchema
from magnetar.schema.info import CompatibilityStrategy, SchemaInfo
from magnetar.schema.resolution import Problem, can_read, problem_of

__all__ = ["can_read", "check_compatible", "check_reader"]


def _effective(strategy: CompatibilityStrategy) -> CompatibilityStrategy:
    # Callers resolve topic/namespace/broker levels first; an UNDEFINED left over means the default.
    return CompatibilityStrategy.FULL if strategy is CompatibilityStrategy.UNDEFINED else strategy


def _label(index: int, versions: Sequence[int] | None) -> str:
    """How a message names a live version: the registry's number when the caller gave the numbers
    (after a deletion, index and number differ), else its index in ``existing``."""
    return f"version {versions[index]}" if versions is not None else f"version index {index}"


def _header(
    strategy: str, index: int, count: int, subject: str = "Schema", versions: Sequence[int] | None = None
) -> str:
    place = "the newest" if index == count - 1 else "0 = the oldest"
    return f"{subject} incompatible under {strategy} with live {_label(index, versions)} ({place}, of {count})"


def _worded(problem: Problem, new_reads: bool, index: int, versions: Sequence[int] | None = None) -> str:
    """The reason in the direction checked: a field the reader lacks is "added" when the new schema
    reads older data, and "removed" when readers still on an older version read the new one."""
    which = _label(index, versions)
    if problem.missing and new_reads:
        return (
            f"field '{problem.path}' added without a default: readers using the new schema cannot fill it "
            f"in data written with {which}"
        )
    if problem.missing:
        return (
            f"field '{problem.path}' removed (or renamed) although {which} has no default for "
            "it: readers still on that version cannot fill it in data written with the new schema"
        )
    if new_reads:
        return f"the new schema cannot read data written with {which}: {problem.text()}"
    return f"readers on {which} cannot read data written with the new schema: {problem.text()}"


def check_compatible(
    new: SchemaInfo,
    existing: Sequence[SchemaInfo],
    strategy: CompatibilityStrategy,
    versions: Sequence[int] | None = None,
) -> None:
    """Whether a producer (or an upload) may add ``new`` after ``existing`` (live versions, oldest
    first); raises ``IncompatibleSchema`` naming the strategy, the version and the field (the
    registry's ``versions`` numbers of ``existing`` when given, else indexes).

    BACKWARD: the new schema reads the last version's data; FORWARD: the last version's readers read
    the new data; FULL: both; the ``_TRANSITIVE`` forms against every live version.
    """
    if not existing:
        return
    strategy = _effective(strategy)
    name = strategy.name
    if strategy is CompatibilityStrategy.ALWAYS_COMPATIBLE:
        return
    if strategy is CompatibilityStrategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchema(
            f"{_header('ALWAYS_INCOMPATIBLE', len(existing) - 1, len(existing), versions=versions)}: "
            "this strategy refuses any "
            "schema other than the live ones"
        )
    count = len(existing)
    indexes = range(count - 1, -1, -1) if strategy.transitive else [count - 1]
    backward = strategy.name.startswith(("BACKWARD", "FULL"))
    forward = strategy.name.startswith(("FORWARD", "FULL"))
    for index in indexes:
        old = existing[index]
        checks = ([(True, problem_of(new, old))] if backward else []) + (
            [(False, problem_of(old, new))] if forward else []
        )
        for new_reads, problem in checks:
            if problem is not None:
                reason = _worded(problem, new_reads, index, versions)
                raise IncompatibleSchema(f"{_header(name, index, count, versions=versions)}: {reason}")


def check_reader(
    reader: SchemaInfo,
    existing: Sequence[SchemaInfo],
    strategy: CompatibilityStrategy,
    versions: Sequence[int] | None = None,
) -> None:
    """Whether a consumer with schema ``reader`` may read a topic whose live versions are ``existing``
    (Pulsar's checkConsumerCompatibility). Callers admit a schema equal to a live version first.

    BACKWARD and the transitive strategies: it must read every live version; FORWARD and FULL: the
    newest (older data is the producers' promise under those strategies).
    """
    if not existing:
        return
    strategy = _effective(strategy)
    name = strategy.name
    if strategy is CompatibilityStrategy.ALWAYS_COMPATIBLE:
        return
    count = len(existing)
    if strategy is CompatibilityStrategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchema(
            f"{_header('ALWAYS_INCOMPATIBLE', count - 1, count, 'Reader schema', versions)}: this strategy admits no "
            "schema other than the live ones"
        )
    every = strategy in (CompatibilityStrategy.BACKWARD,) or strategy.transitive
    indexes = range(count - 1, -1, -1) if every else [count - 1]
    for index in indexes:
        problem = problem_of(reader, existing[index])
        if problem is not None:
            raise IncompatibleSchema(
                f"{_header(name, index, count, 'Reader schema', versions)}: it cannot read data written with "
                f"{_label(index, versions)}: {problem.text()}"
            )
