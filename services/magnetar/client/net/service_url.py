"""Service URLs as pulsar-client takes them: ``magnetar://`` / ``pulsar://`` / ``tcp://`` and their
``+ssl`` forms, bare ``host:port``, several hosts after one scheme (``magnetar://h1:1,h2:2``), and
the one canonical form the connection pool keys its connections by, so that a redirect to a broker
the client already speaks to reuses that connection."""

from __future__ import annotations

from magnetar.client.net.tls import TLS_SCHEMES
from magnetar.protocol.errors import InvalidTopicName

DEFAULT_PORT = 6650
_SCHEMES = (*TLS_SCHEMES, "magnetar://", "pulsar://", "tcp://")


def is_tls_url(url: str) -> bool:
    """``magnetar+ssl://`` or ``pulsar+ssl://``: dial with TLS."""
    return url.strip().startswith(TLS_SCHEMES)


def _strip_scheme(url: str) -> str:
    rest = url.strip()
    for scheme in _SCHEMES:
        if rest.startswith(scheme):
            return rest[len(scheme) :].rstrip("/")
    if "://" in rest:
        raise InvalidTopicName(f"unsupported service URL scheme in {url!r}")
    return rest.rstrip("/")


def _host_port(hostport: str) -> tuple[str, int]:
    host, sep, port = hostport.strip().rpartition(":")
    if not sep:
        return hostport.strip(), DEFAULT_PORT
    return host.strip("[]"), int(port)


def parse_service_url(url: str) -> tuple[str, int]:
    """``magnetar://host:port`` (or ``pulsar://``, ``tcp://``, bare ``host:port``) → (host, port).

    For a multi-host URL (``magnetar://h1:1,h2:2``) this is the first host; ``service_urls`` gives all.
    """
    return _host_port(_strip_scheme(url).split(",", 1)[0])


def service_urls(url: str, *, tls: bool = False) -> list[str]:
    """Every broker of a service URL, normalized: ``magnetar://h1:p1,h2:p2`` lists two, as in Pulsar.

    With ``tls`` (pulsar-client's ``use_tls``) or a TLS scheme every one is a ``magnetar+ssl://`` key."""
    hosts = [h for h in _strip_scheme(url).split(",") if h.strip()]
    if not hosts:
        raise InvalidTopicName(f"no host in service URL {url!r}")
    tls = tls or is_tls_url(url)
    return [_key(*_host_port(h), tls=tls) for h in hosts]


def _key(host: str, port: int, *, tls: bool = False) -> str:
    return f"{'magnetar+ssl' if tls else 'magnetar'}://{host}:{port}"


def normalize_url(url: str) -> str:
    """Canonical key for the connection pool, so redirects to the same broker share a connection."""
    return _key(*parse_service_url(url), tls=is_tls_url(url))
