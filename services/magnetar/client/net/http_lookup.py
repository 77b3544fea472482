"""Topic lookup over the admin REST API, for an ``http://`` / ``https://`` service URL (Pulsar's HTTP lookup).

pulsar-client accepts a broker's web service URL as its service URL: lookups, partition counts
and a namespace's topics are then asked over HTTP, and only producers and consumers use the
binary protocol, on the broker each lookup names. The paths are Pulsar's and Magnetar's admin
API's (``broker/admin/server.py``):

- ``GET /lookup/v2/topic/persistent/{tenant}/{ns}/{topic}`` answers the owner's ``brokerUrl``
  (a broker that does not own the topic asks the owner itself, so there is no redirect to follow);
- ``GET /admin/v2/persistent/{tenant}/{ns}/{topic}/partitions`` answers ``{"partitions": n}``;
- ``GET /admin/v2/persistent/{tenant}/{ns}`` lists the namespace's topics (a partitioned topic by
  its partitions, which are folded back into its own name here).

The client must not depend on the server extras (aiohttp), so this is a minimal HTTP/1.1 client
on asyncio streams: one ``GET`` per connection (``Connection: close``), a JSON answer with a
``Content-Length``. Credentials go in the headers the client's authentication gives
(``Authorization: Bearer`` for a token, ``Authorization: Basic`` for Basic, none for TLS). Each
host of a multi-host URL is tried in turn, starting from the last that answered.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any
from urllib.parse import quote

from magnetar.client.net.auth import Authentication
from magnetar.protocol import commands as cmds
from magnetar.protocol import errors
from magnetar.protocol.topic_name import TopicName

__all__ = ["HttpLookup", "is_http_url"]

MAX_RESPONSE = 16 * 1024 * 1024


def is_http_url(url: str) -> bool:
    return url.strip().lower().startswith(("http://", "https://"))


def _hosts(url: str) -> tuple[bool, list[tuple[str, int]]]:
    """(https?, [(host, port), ...]) of ``http[s]://h1:p1,h2:p2/``."""
    scheme, rest = url.strip().split("://", 1)
    tls = scheme.lower() == "https"
    hostports = rest.split("/", 1)[0]
    out: list[tuple[str, int]] = []
    for hp in hostports.split(","):
        hp = hp.strip()
        if not hp:
            continue
        host, sep, port = hp.rpartition(":")
        out.append((host.strip("[]"), int(port)) if sep and port.isdigit() else (hp, 443 if tls else 80))
    if not out:
        raise errors.InvalidUrl(f"no host in service URL {url!r}")
    return tls, out


def _error(status: int, reason: str) -> errors.MagnetarError:
    if status == 401:
        return errors.AuthenticationError(reason)
    if status == 403:
        return errors.AuthorizationError(reason)
    if status == 404:
        return errors.TopicNotFound(reason)
    if status == 307 or status >= 500:
        return errors.ServiceNotReady(reason)  # retryable: ownership may be moving
    return errors.LookupError(reason)


class HttpLookup:
    """Lookups, partition counts and topic lists of one ``http[s]://`` service URL."""

    def __init__(
        self,
        service_url: str,
        *,
        ssl_context: ssl.SSLContext | None,
        timeout: float,
        authentication: Authentication | None = None,
    ) -> None:
        self.tls, self._hosts = _hosts(service_url)
        self._ssl = ssl_context if self.tls else None
        self._timeout = timeout
        self._auth = authentication
        self._index = 0

    async def _get(self, path: str) -> Any:
        """The JSON answer of ``GET path`` from the first host that answers."""
        last: errors.MagnetarError | None = None
        for i in range(len(self._hosts)):
            index = (self._index + i) % len(self._hosts)
            host, port = self._hosts[index]
            try:
                status, body = await asyncio.wait_for(self._request(host, port, path), self._timeout)
            except (OSError, asyncio.IncompleteReadError, ssl.SSLError) as exc:
                last = errors.NotConnected(f"cannot reach {host}:{port} for HTTP lookup: {exc}")
                continue
            except TimeoutError:
                last = errors.Timeout(f"HTTP lookup on {host}:{port} timed out")
                continue
            self._index = index
            try:
                decoded = json.loads(body) if body.strip() else None
            except ValueError as exc:
                raise errors.LookupError(f"GET {path}: answer is not JSON: {exc}") from exc
            if status != 200:
                reason = decoded.get("reason") if isinstance(decoded, dict) else None
                raise _error(status, f"GET {path}: HTTP {status}: {reason or body[:200]!r}")
            return decoded
        assert last is not None
        raise last

    async def _request(self, host: str, port: int, path: str) -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection(
            host, port, ssl=self._ssl, server_hostname=host if self._ssl is not None else None
        )
        try:
            headers = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Accept: application/json", "Connection: close"]
            if self._auth is not None:
                headers.extend(f"{name}: {value}" for name, value in self._auth.http_headers().items())
            writer.write(("\r\n".join(headers) + "\r\n\r\n").encode("latin-1"))
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            length: int | None = None
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if length is not None:
                if length > MAX_RESPONSE:
                    raise errors.LookupError(f"GET {path}: answer of {length} bytes is too large")
                body = await reader.readexactly(length)
            else:
                body = await reader.read(MAX_RESPONSE)
            return status, body
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (OSError, ssl.SSLError):
                pass

    @staticmethod
    def _topic_path(name: TopicName) -> str:
        return "/".join(quote(p, safe="") for p in (name.tenant, name.namespace, name.local_name))

    async def lookup(self, topic: str, listener_name: str | None = None) -> cmds.LookupResponse:
        """The owner of ``topic``, as the binary ``lookup_response`` would name it (never a redirect).

        ``listener_name`` asks for that advertised listener's address (Pulsar's ``listenerName``)."""
        name = TopicName.parse(topic)
        query = f"?listenerName={quote(listener_name, safe='')}" if listener_name else ""
        answer = await self._get(f"/lookup/v2/topic/persistent/{self._topic_path(name)}{query}")
        if not isinstance(answer, dict) or not answer.get("brokerUrl"):
            raise errors.LookupError(f"HTTP lookup of {topic}: no brokerUrl in {answer!r}")
        url = str(answer.get("nativeUrl") or answer["brokerUrl"])
        url_tls = answer.get("brokerUrlTls")
        if self.tls and not url_tls:  # a TLS-only broker names its TLS port in brokerUrl
            url_tls = "magnetar+ssl://" + url.split("://", 1)[-1]
        return cmds.lookup_response(0, url, False, str(url_tls) if url_tls else None)

    async def partitions(self, topic: str) -> int:
        name = TopicName.parse(topic)
        answer = await self._get(f"/admin/v2/persistent/{self._topic_path(name)}/partitions")
        return int((answer or {}).get("partitions") or 0) if isinstance(answer, dict) else 0

    async def topics_of_namespace(self, namespace: str, mode: str = cmds.TOPICS_PERSISTENT) -> list[str]:
        """The namespace's topics of ``mode``'s domains (WIRE.md R107), a partitioned one once by its own name."""
        tenant, ns = namespace.split("/", 1)
        domains = {
            cmds.TOPICS_PERSISTENT: ["persistent"],
            cmds.TOPICS_NON_PERSISTENT: ["non-persistent"],
            cmds.TOPICS_ALL: ["persistent", "non-persistent"],
        }[mode]
        names: list[str] = []
        for domain in domains:
            answer = await self._get(f"/admin/v2/{domain}/{quote(tenant, safe='')}/{quote(ns, safe='')}")
            names.extend(str(TopicName.parse(str(t)).partitioned_base) for t in answer or ())
        return list(dict.fromkeys(names))
