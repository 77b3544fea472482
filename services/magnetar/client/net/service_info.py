"""Which cluster a client uses: ``ServiceInfo``, ``ServiceInfoProvider``, ``AutoClusterFailover`` (pulsar-client 3.x).

A ``Client`` may be given a ``ServiceInfoProvider`` instead of a service URL. The client's
constructor asks it once for ``initial_service_info()``, then calls
``initialize(on_service_info_update)``; whenever the provider calls that function with another
``ServiceInfo`` (from any thread, from ``initialize`` itself included), the client switches:
later lookups go to the new service URL, with its authentication and trust store, and every open
connection is closed, so producers and consumers reconnect to the new cluster through their usual
reconnection (``reconnect.py``). ``client.get_service_info()`` tells which one is in use;
``close()`` of the client calls the provider's ``close()``.

``AutoClusterFailover`` is the provider pulsar-client ships: every ``check_interval_ms`` it probes
the cluster in use (a TCP connection to the first host of its service URL); after
``failover_threshold`` failed probes in a row it switches to the first secondary that answers, and
while on a secondary it probes the primary and switches back after ``switch_back_threshold``
successful probes in a row. Probing runs on a thread of its own, so it goes on while the client's
loop is busy.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from magnetar.client.net.auth import Authentication
from magnetar.client.net.service_url import is_tls_url, service_urls

__all__ = [
    "AutoClusterFailover",
    "ServiceInfo",
    "ServiceInfoProvider",
    "as_provider",
    "check_update",
    "initial_service_info",
    "start_provider",
]


class ServiceInfo:
    """How to reach one cluster: its service URL, the authentication and the TLS trust store to use there."""

    def __init__(
        self,
        service_url: str,
        authentication: Authentication | None = None,
        tls_trust_certs_file_path: str | None = None,
    ) -> None:
        if not isinstance(service_url, str):
            raise ValueError(
                f"Argument service_url is expected to be of type 'str' and not '{type(service_url).__name__}'"
            )
        if authentication is not None and not isinstance(authentication, Authentication):
            raise ValueError("Argument authentication is expected to be either None or of type 'Authentication'")
        if tls_trust_certs_file_path is not None and not isinstance(tls_trust_certs_file_path, str):
            raise ValueError("Argument tls_trust_certs_file_path is expected to be either None or of type 'str'")
        self._service_url = service_url
        self._authentication = authentication
        self._tls_trust_certs_file_path = tls_trust_certs_file_path

    @property
    def service_url(self) -> str:
        return self._service_url

    @property
    def authentication(self) -> Authentication | None:
        return self._authentication

    @property
    def tls_trust_certs_file_path(self) -> str | None:
        return self._tls_trust_certs_file_path

    @property
    def use_tls(self) -> bool:
        """True for a TLS service URL (``pulsar+ssl://``, ``magnetar+ssl://``, ``https://``)."""
        return is_tls_url(self._service_url) or self._service_url.strip().startswith("https://")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ServiceInfo):
            return NotImplemented
        return (self._service_url, self._authentication, self._tls_trust_certs_file_path) == (
            other._service_url,
            other._authentication,
            other._tls_trust_certs_file_path,
        )

    def __hash__(self) -> int:
        return hash(self._service_url)

    def __repr__(self) -> str:
        return (
            f"ServiceInfo(service_url={self._service_url!r}, use_tls={self.use_tls}, "
            f"tls_trust_certs_file_path={self._tls_trust_certs_file_path!r})"
        )


class ServiceInfoProvider:
    """Base class of a provider: subclasses return the first ``ServiceInfo`` and may push later ones.

    ``initialize`` receives the function to call with a new ``ServiceInfo`` (callable from any
    thread); ``close`` is called when the client closes and should stop any background work.
    """

    def initial_service_info(self) -> ServiceInfo:
        raise NotImplementedError("a ServiceInfoProvider must implement initial_service_info()")

    def initialize(self, on_service_info_update: Callable[[ServiceInfo], None]) -> None:
        """Start watching; the default never changes the service info."""

    def close(self) -> None:
        """Stop background work; the default has none."""


def probe(info: ServiceInfo, timeout: float) -> bool:
    """True if the first host of ``info``'s service URL accepts a TCP connection within ``timeout`` seconds."""
    url = info.service_url.strip()
    if url.startswith(("http://", "https://")):
        scheme, rest = url.split("://", 1)
        hostport = rest.split("/", 1)[0].split(",")[0]
        host, sep, port = hostport.rpartition(":")
        address = (host.strip("[]"), int(port)) if sep else (hostport, 443 if scheme == "https" else 80)
    else:
        first = service_urls(url)[0].split("://", 1)[1]
        host, _, port = first.rpartition(":")
        address = (host.strip("[]"), int(port))
    try:
        with socket.create_connection(address, timeout=timeout):
            return True
    except OSError:
        return False


class AutoClusterFailover(ServiceInfoProvider):
    """Switch to a secondary cluster when the primary stops answering, and back when it answers again."""

    def __init__(
        self,
        primary: ServiceInfo,
        secondary: list[ServiceInfo],
        check_interval_ms: int = 5000,
        failover_threshold: int = 1,
        switch_back_threshold: int = 1,
    ) -> None:
        if not isinstance(primary, ServiceInfo):
            raise ValueError("Argument primary is expected to be of type 'ServiceInfo'")
        if not isinstance(secondary, Sequence) or isinstance(secondary, str) or not secondary:
            raise ValueError("Argument secondary is expected to be a non-empty list of 'ServiceInfo'")
        if not all(isinstance(s, ServiceInfo) for s in secondary):
            raise ValueError("Argument secondary is expected to be a list of 'ServiceInfo'")
        for name, value in (
            ("check_interval_ms", check_interval_ms),
            ("failover_threshold", failover_threshold),
            ("switch_back_threshold", switch_back_threshold),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Argument {name} must be a positive int")
        self.primary = primary
        self.secondary = list(secondary)
        self.check_interval_ms = check_interval_ms
        self.failover_threshold = failover_threshold
        self.switch_back_threshold = switch_back_threshold
        self._current = primary
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._update: Callable[[ServiceInfo], None] | None = None

    def initial_service_info(self) -> ServiceInfo:
        return self.primary

    @property
    def current(self) -> ServiceInfo:
        return self._current

    def initialize(self, on_service_info_update: Callable[[ServiceInfo], None]) -> None:
        if self._thread is not None:
            return
        self._update = on_service_info_update
        self._thread = threading.Thread(target=self._run, name="magnetar-cluster-failover", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # ---------------------------------------------------------------- probing

    def _run(self) -> None:
        interval = self.check_interval_ms / 1000.0
        timeout = min(interval, 5.0)
        failures = 0  # consecutive failed probes of the cluster in use
        primary_ok = 0  # consecutive answered probes of the primary, while on a secondary
        while not self._stop.wait(interval):
            if self._current is self.primary:
                primary_ok = 0
                failures = 0 if probe(self.primary, timeout) else failures + 1
                if failures >= self.failover_threshold:
                    target = next((s for s in self.secondary if probe(s, timeout)), None)
                    if target is not None:
                        failures = 0
                        self._switch(target)
                continue
            if probe(self.primary, timeout):
                primary_ok += 1
                if primary_ok >= self.switch_back_threshold:
                    primary_ok = failures = 0
                    self._switch(self.primary)
                continue
            primary_ok = 0
            failures = 0 if probe(self._current, timeout) else failures + 1
            if failures >= self.failover_threshold:
                target = next((s for s in self.secondary if s is not self._current and probe(s, timeout)), None)
                if target is not None:
                    failures = 0
                    self._switch(target)

    def _switch(self, target: ServiceInfo) -> None:
        self._current = target
        update = self._update
        if update is not None and not self._stop.is_set():
            update(target)

    def __repr__(self) -> str:
        return (
            f"AutoClusterFailover(primary={self.primary!r}, secondary={self.secondary!r}, "
            f"check_interval_ms={self.check_interval_ms}, failover_threshold={self.failover_threshold}, "
            f"switch_back_threshold={self.switch_back_threshold})"
        )


def initial_service_info(
    provider: ServiceInfoProvider, authentication: object, tls_trust_certs_file_path: object
) -> ServiceInfo:
    """The provider's first ``ServiceInfo``, for a ``Client`` given ``provider`` as its service URL.

    As pulsar-client: the credentials and the trust store of each cluster belong in its
    ``ServiceInfo``, so the ``Client``'s own ``authentication`` or ``tls_trust_certs_file_path``
    next to a provider is a ``ValueError`` (which of the two would apply to a switched-to cluster
    could only be guessed), and so is a provider that answers anything but a ``ServiceInfo``.
    """
    if authentication is not None or tls_trust_certs_file_path is not None:
        raise ValueError(
            "authentication and tls_trust_certs_file_path cannot be given with a ServiceInfoProvider: "
            "set them in each ServiceInfo instead"
        )
    info = provider.initial_service_info()
    _check_info(info, "initial_service_info()")
    return info


def start_provider(provider: ServiceInfoProvider, on_update: Callable[[ServiceInfo], None]) -> None:
    """Call the provider's ``initialize(on_update)``; if it raises, ``close()`` it before raising."""
    try:
        provider.initialize(on_update)
    except BaseException:
        provider.close()
        raise


def _check_info(info: object, source: str) -> None:
    if not isinstance(info, ServiceInfo):
        raise ValueError(f"the ServiceInfoProvider's {source} must give a ServiceInfo, not {type(info).__name__}")


def check_update(info: object) -> None:
    """``ValueError`` for a provider update that is not a ``ServiceInfo`` (raised to the provider)."""
    _check_info(info, "update")


def as_provider(service_url: Any) -> ServiceInfoProvider | None:
    """The provider behind a ``Client``'s ``service_url`` argument, or None for a plain URL string."""
    if isinstance(service_url, ServiceInfoProvider):
        return service_url
    if isinstance(service_url, str):
        return None
    raise ValueError(
        "Argument service_url is expected to be of type 'str' or 'ServiceInfoProvider' and not "
        f"'{type(service_url).__name__}'"
    )
