"""What a successful authentication gives: the role, the method that proved it, and its expiry.

A module of its own so that every provider (``providers``, ``tls_provider``) can build one without
importing the set of providers that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Authenticated:
    role: str
    method: str
    expires_at: float | None  # epoch seconds; None: the credentials never expire
