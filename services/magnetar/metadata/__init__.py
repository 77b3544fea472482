"""Metadata store: the coordination state of a cluster (DESIGN.md §5), with CAS on versions."""

from magnetar.metadata.store import (
    ANY_VERSION,
    MUST_NOT_EXIST,
    MetadataStore,
    Notification,
    Stat,
    Versioned,
)

__all__ = ["ANY_VERSION", "MUST_NOT_EXIST", "MetadataStore", "Notification", "Stat", "Versioned"]
