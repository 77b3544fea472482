"""Broker settings, named after Pulsar's broker.conf where one exists."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.managed_ledger import ManagedLedgerConfig
from magnetar.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE


@dataclass(slots=True)
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 6650
    web_port: int = 8080
    advertised_address: str | None = None
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    # managedLedgerDefaultEnsembleSize / WriteQuorum / AckQuorum
    default_ensemble_size: int = 1
    default_write_quorum: int = 1
    default_ack_quorum: int = 1
    allow_auto_topic_creation: bool = True
    managed_ledger: ManagedLedgerConfig = field(default_factory=ManagedLedgerConfig)

    @property
    def advertised_host(self) -> str:
        return self.advertised_address or self.host
