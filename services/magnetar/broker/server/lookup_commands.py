"""The lookup commands of a client connection: where a topic is served, and what a namespace holds.

``lookup`` and ``partitioned_metadata`` (counted against ``maxConcurrentLookupRequest``, R89),
``get_schema`` (R121) and ``get_topics_of_namespace`` (R20g, R107): each is authorized as a lookup
(R70) and answered by any broker, none of them touching a producer or a consumer.
"""

from __future__ import annotations

from magnetar.broker.authz import binary as authz
from magnetar.broker.schema.registry import SchemaRegistry
from magnetar.broker.server.transport import ConnectionTransport
from magnetar.broker.topics.missing_namespace import require_namespace_of
from magnetar.broker.topics.namespace_topics import topics_of_namespace
from magnetar.protocol import commands as c
from magnetar.protocol import fields
from magnetar.protocol.errors import InvalidCommand, TopicNotFound
from magnetar.protocol.topic_name import TopicName, check_namespace


class LookupCommands(ConnectionTransport):
    """``lookup``, ``partitioned_metadata``, ``get_schema`` and ``get_topics_of_namespace`` (a mixin of
    ``ServerConnection``)."""

    def _lookup(self, cmd: c.Lookup) -> None:
        name = TopicName.parse(cmd["topic"])
        limits = self.guard.limits
        limits.lookup_started()  # R89: ServiceNotReady past maxConcurrentLookupRequest

        async def run() -> None:
            try:
                await authz.check_lookup(self.service, name, self.auth_role)  # R70
                # R110: the addresses of the advertised listener the client named
                url, redirect, url_tls = await self.service.lookup_with_tls(name, cmd.get("listener_name"))
            finally:
                limits.lookup_done()
            self.write(c.lookup_response(cmd["rid"], url, redirect, url_tls))

        self._spawn(cmd["rid"], run())

    def _partitioned_metadata(self, cmd: c.PartitionedMetadata) -> None:
        name = TopicName.parse(cmd["topic"])
        limits = self.guard.limits
        limits.lookup_started()  # R89, as lookup (Pulsar counts both)

        async def run() -> None:
            try:
                await authz.check_partitioned_metadata(self.service, name, self.auth_role)  # R70
                await require_namespace_of(self.service.resources, name)  # TopicNotFound, as Pulsar's
                # Topic records belong to the persistent domain: a non-persistent topic is never partitioned.
                partitions = await self.service.resources.partitions(name) if name.is_persistent else 0
            finally:
                limits.lookup_done()
            self.write(c.partitioned_metadata_response(cmd["rid"], partitions))

        self._spawn(cmd["rid"], run())

    def _get_schema(self, cmd: c.GetSchema) -> None:
        """R121: a version of the topic's schema (the newest live one without ``version``); any
        broker answers, the registry being in the metadata store."""
        name = TopicName.parse(cmd["topic"])
        raw = cmd.get("version")
        version = None if raw is None else fields.integer(raw, "version")

        async def run() -> None:
            await authz.check_lookup(self.service, name, self.auth_role)  # as lookup (R70)
            found = await SchemaRegistry(self.service.store).get(name, version)
            if found is None:
                which = "latest" if version is None else str(version)
                raise TopicNotFound(f"no schema version {which} for topic {name}")
            self.write(c.get_schema_response(cmd["rid"], found.version, found.info.to_wire()))

        self._spawn(cmd["rid"], run())

    def _get_topics_of_namespace(self, cmd: c.GetTopicsOfNamespace) -> None:
        """R20g, R107: any broker of a cluster can answer (``namespace_topics``)."""
        namespace = str(cmd["namespace"])
        parts = namespace.split("/")
        if len(parts) != 2 or not all(parts):
            raise InvalidCommand(f"namespace must be tenant/namespace, got {namespace!r}")
        check_namespace(*parts)  # R92
        mode = str(cmd.get("mode", c.TOPICS_PERSISTENT))
        if mode not in c.TOPICS_MODES:  # R107
            raise InvalidCommand(f"mode must be one of {', '.join(c.TOPICS_MODES)}, got {mode[:40]!r}")

        async def run() -> None:
            await authz.check_topics_of_namespace(self.service, parts[0], parts[1], self.auth_role)  # R70
            topics = await topics_of_namespace(self.service, parts[0], parts[1], mode)
            self.write(c.topics_of_namespace_response(cmd["rid"], topics))

        self._spawn(cmd["rid"], run())
