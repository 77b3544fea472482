"""Advertised listeners: a broker reachable under several addresses, each client told the one it can reach.

Pulsar's broker settings ``advertisedListeners=internal:pulsar://10.0.0.7:6650,external:pulsar://
broker-0.example.com:6651`` give a broker several named addresses (say, the in-cluster one and the
one outside clients reach through a load balancer or NAT); ``internalListenerName`` names the one
brokers and clients without a listener name use (the first listed by default). A client names its
listener (pulsar-client's ``listener_name``) and every lookup answers that listener's address of
the owner: its ``pulsar://`` URL and, if listed, its ``pulsar+ssl://`` URL (a name may be listed
once per scheme). A broker without the asked listener fails the lookup with ``ServiceNotReady``, as
Pulsar's does (WIRE.md R110, R111).

Each broker publishes its listeners with its registration (``BrokerInfo.listeners``), so whichever
broker answers a lookup knows the owner's addresses. The broker binds only ``--host``/``--port``
(and its TLS port): the listener addresses must lead there (a second name, NAT, a proxy), where
Pulsar can also bind one port per listener (``bindAddresses``).
"""

from __future__ import annotations

from collections.abc import Mapping

from magnetar.protocol.errors import ServiceNotReady

__all__ = ["Listener", "choose", "from_doc", "internal_listener", "parse_advertised_listeners", "to_doc"]

Listener = tuple[str | None, str | None]  # (plain URL, TLS URL), either may be missing

_PLAIN = ("pulsar://", "magnetar://")
_TLS = ("pulsar+ssl://", "magnetar+ssl://")


def parse_advertised_listeners(text: str | None) -> dict[str, Listener]:
    """``name:url,name:url,...`` (Pulsar's ``advertisedListeners``) as {name: (url, tls_url)}, in order."""
    out: dict[str, Listener] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, url = item.partition(":")
        name, url = name.strip(), url.strip()
        if not sep or not name or "://" not in url:
            raise ValueError(f"advertisedListeners entry {item!r} is not name:scheme://host:port")
        plain, tls = out.get(name, (None, None))
        if url.startswith(_TLS):
            if tls is not None:
                raise ValueError(f"advertisedListeners lists two TLS addresses for listener {name!r}")
            tls = url
        elif url.startswith(_PLAIN):
            if plain is not None:
                raise ValueError(f"advertisedListeners lists two addresses for listener {name!r}")
            plain = url
        else:
            raise ValueError(f"advertisedListeners entry {item!r}: the scheme must be pulsar:// or pulsar+ssl://")
        out[name] = (plain, tls)
    return out


def internal_listener(listeners: Mapping[str, Listener], internal_listener_name: str | None) -> str | None:
    """The internal listener's name: the one named, else the first; None without listeners."""
    if internal_listener_name:
        if internal_listener_name not in listeners:
            raise ValueError(f"internalListenerName {internal_listener_name!r} is not in advertisedListeners")
        return internal_listener_name
    return next(iter(listeners), None)


def choose(
    broker_id: str,
    broker_url: str,
    broker_url_tls: str | None,
    listeners: Mapping[str, Listener],
    internal: str | None,
    listener_name: str | None,
) -> tuple[str, str | None]:
    """(url, tls_url) a lookup answers for this broker, for a client that named ``listener_name`` (or none)."""
    name = listener_name or internal
    if name is None or not listeners:
        if listener_name:
            raise ServiceNotReady(f"broker {broker_id} has no advertised listener named {listener_name!r}")
        return broker_url, broker_url_tls
    found = listeners.get(name)
    if found is None:
        raise ServiceNotReady(f"broker {broker_id} has no advertised listener named {name!r}")
    plain, tls = found
    return plain or tls or broker_url, tls


def to_doc(listeners: Mapping[str, Listener]) -> dict[str, list[str | None]]:
    return {name: [plain, tls] for name, (plain, tls) in listeners.items()}


def from_doc(doc: object) -> dict[str, Listener]:
    if not isinstance(doc, dict):
        return {}
    out: dict[str, Listener] = {}
    for name, pair in doc.items():
        if isinstance(pair, list | tuple) and len(pair) == 2:
            out[str(name)] = (str(pair[0]) if pair[0] else None, str(pair[1]) if pair[1] else None)
    return out
