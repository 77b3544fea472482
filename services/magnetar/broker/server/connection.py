"""One client connection: decode frames, run commands, write responses and pushed messages.

It is an ``asyncio.Protocol`` rather than a stream reader loop because the publish path is hot:
``data_received`` decodes every whole frame and hands sends straight to the topic without a task
switch per frame. Outgoing frames are buffered and written once per event-loop iteration.

Bad input never reaches storage: an undecodable or oversized frame, a value that is not a
command, or an unknown command gets one error frame and closes this connection only. Fields of
known commands are checked (``protocol.fields``) before anything reaches a subscription (Key_Shared
ranges, batch-index acks, reader start ids): a bad one is ``InvalidCommand`` for that request.

The class is split by concern: ``transport.ConnectionTransport`` holds the state and the byte
handling, and one mixin per group of commands holds their handlers (``producer_commands``,
``consumer_commands``, ``lookup_commands``); this module puts them together with the handler table
and the session commands (connect, ping, re-authentication).
"""

from __future__ import annotations

from magnetar import __version__
from magnetar.broker.auth.tls_provider import with_peer_certificate
from magnetar.broker.server.consumer_commands import ConsumerCommands
from magnetar.broker.server.lookup_commands import LookupCommands
from magnetar.broker.server.producer_commands import ProducerCommands
from magnetar.broker.service import BrokerService
from magnetar.protocol import commands as c
from magnetar.protocol.errors import AuthenticationError


class ServerConnection(ProducerCommands, ConsumerCommands, LookupCommands):
    def __init__(self, service: BrokerService) -> None:
        super().__init__(service)
        # Each handler takes its command's TypedDict; ``_run`` checked the required fields.
        self._handlers = {
            c.CONNECT: self._connect,
            c.PING: self._ping,
            c.PONG: self._noop,
            c.LOOKUP: self._lookup,
            c.PARTITIONED_METADATA: self._partitioned_metadata,
            c.PRODUCER: self._producer,
            c.SEND: self._send,
            c.CLOSE_PRODUCER: self._close_producer,
            c.SUBSCRIBE: self._subscribe,
            c.FLOW: self._flow,
            c.ACK: self._ack,
            c.REDELIVER: self._redeliver,
            c.CLOSE_CONSUMER: self._close_consumer,
            c.UNSUBSCRIBE: self._unsubscribe,
            c.SEEK: self._seek,
            c.SEEK_PUBLISH_TIME: self._seek_publish_time,
            c.GET_LAST_MESSAGE_ID: self._get_last_message_id,
            c.GET_TOPICS_OF_NAMESPACE: self._get_topics_of_namespace,
            c.GET_SCHEMA: self._get_schema,
            c.AUTH_RESPONSE: self._auth_response,
        }

    # ------------------------------------------------------------------ session commands
    def _noop(self, cmd: c.Pong) -> None:
        pass

    def _ping(self, cmd: c.Ping) -> None:
        self.write(c.pong())

    def _connect(self, cmd: c.Connect) -> None:
        try:
            self.auth.on_connect(with_peer_certificate(cmd, self.transport))  # R92: mTLS role
        except AuthenticationError as exc:  # R61: refused, and the connection closes
            self._fatal(str(exc.code), str(exc), cmd["rid"])
            return
        self.guard.on_authenticated()  # R90: full-size frames from now on
        self.decoder.max_frame_size = self.service.config.max_message_size + 64 * 1024
        self.write(c.connected(cmd["rid"], __version__, c.PROTOCOL_VERSION, self.service.config.max_message_size))

    def _auth_response(self, cmd: c.AuthResponse) -> None:
        """R62: fresh credentials after ``auth_challenge``; refused ones close the connection."""
        try:
            self.auth.on_response(cmd)
        except AuthenticationError as exc:
            self._fatal(str(exc.code), str(exc))
