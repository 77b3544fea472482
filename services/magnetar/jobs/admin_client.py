"""The broker admin REST API as the Spark jobs use it: plain HTTP (urllib), JSON in and out.

The jobs talk to brokers only through this API (the brokers stay the only writers of the log and
of cursors); the bulk data comes straight from the bookies. Any broker will do: one that does not
own a topic forwards the request to the owner. Transient failures (connection refused, 5xx, a 307
while a topic moves) are retried a few times, because a job that runs for minutes must ride out a
broker restart rather than fail the whole run.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from magnetar.client.net.auth import AuthenticationToken, token_from_params
from magnetar.jobs.credentials import JobCredentials
from magnetar.protocol.topic_name import TopicName

RETRIES = 5
RETRY_DELAY = 0.5


class AdminError(Exception):
    """A refused admin call: ``status`` (0 when the broker could not be reached) and its reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


def topic_path(topic: str) -> str:
    """``persistent://t/ns/x`` -> ``persistent/t/ns/x`` (the admin API's path of a topic)."""
    t = TopicName.parse(topic)
    return f"{t.domain}/{t.tenant}/{t.namespace}/{urllib.parse.quote(t.local_name, safe='')}"


class AdminClient:
    """Calls on one broker's admin URL (``http://host:8080``).

    ``token`` (``token:<jwt>``, ``file:///path`` re-read on every call, or a bare JWT) goes in
    ``Authorization: Bearer`` when the brokers have authentication on; without one, the job's
    environment token (``MAGNETAR_AUTH_TOKEN`` / ``MAGNETAR_AUTH_TOKEN_FILE``, jobs/credentials.py)
    is used, so every job's calls carry the ``jobs`` identity the operator gave it.
    ``ssl_context`` verifies an ``https://`` URL (without one, the environment's trust file).
    """

    def __init__(
        self, url: str, *, timeout: float = 30.0, token: str | None = None, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        if token is None:
            token = JobCredentials().admin_params()
        if ssl_context is None and self.url.startswith("https://"):
            ssl_context = JobCredentials().admin_ssl_context()  # MAGNETAR_TLS_TRUST_CERTS_FILE
        self._token: AuthenticationToken | None = token_from_params(token) if token else None
        self._ssl = ssl_context

    def __repr__(self) -> str:
        return f"AdminClient({self.url!r})"

    def call(self, method: str, path: str, body: Any = None, *, ok_missing: bool = False) -> Any:
        """``method path`` (under ``/admin/v2`` unless it starts with ``/``); the JSON answer, or None
        for an empty one (and for a 404 when ``ok_missing``)."""
        full = self.url + (path if path.startswith("/") else "/admin/v2/" + path)
        data = None if body is None else json.dumps(body).encode()
        last: AdminError | None = None
        for attempt in range(RETRIES):
            headers = {"Content-Type": "application/json"}
            if self._token is not None:
                headers["Authorization"] = f"Bearer {self._token.token()}"
            req = urllib.request.Request(full, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl) as resp:
                    raw = resp.read()
                return json.loads(raw) if raw.strip() else None
            except urllib.error.HTTPError as exc:
                text = exc.read().decode(errors="replace")
                try:
                    reason = str(json.loads(text).get("reason", text))
                except (ValueError, AttributeError):
                    reason = text
                if exc.code == 404 and ok_missing:
                    return None
                last = AdminError(exc.code, reason)
                if exc.code < 500 and exc.code != 307:
                    raise last from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                last = AdminError(0, f"cannot reach {self.url}: {getattr(exc, 'reason', exc)}")
            except http.client.HTTPException as exc:  # an answer, but not HTTP: asking again will not change it
                raise AdminError(
                    0,
                    f"{self.url} did not answer as an HTTP server ({exc.__class__.__name__}): is it the broker's "
                    "binary port? --admin-url takes the admin (web service) port, e.g. http://localhost:8080",
                ) from None
            time.sleep(RETRY_DELAY * (attempt + 1))
        assert last is not None
        raise last

    def get(self, path: str, *, ok_missing: bool = False) -> Any:
        return self.call("GET", path, ok_missing=ok_missing)

    def post(self, path: str, body: Any = None) -> Any:
        return self.call("POST", path, body)

    def put(self, path: str, body: Any = None) -> Any:
        return self.call("PUT", path, body)

    def delete(self, path: str) -> Any:
        return self.call("DELETE", path)

    # ------------------------------------------------------------------ the calls the jobs share
    def internal_stats(self, topic: str, *, metadata: bool = False) -> dict[str, Any]:
        """Pulsar's PersistentTopicInternalStats (``broker/admin/internal_stats.py``) of one (partition) topic."""
        suffix = "?metadata=true" if metadata else ""
        return dict(self.get(f"{topic_path(topic)}/internalStats{suffix}"))

    def partitions(self, topic: str) -> int:
        """Pulsar's partitioned-topic metadata: 0 for a non-partitioned topic."""
        doc = self.get(f"{topic_path(topic)}/partitions")
        return int(doc.get("partitions", 0)) if isinstance(doc, dict) else 0

    def topics_of(self, namespace: str) -> list[str]:
        """Every persistent topic of ``tenant/ns``, partitions listed one by one (as Pulsar's
        ``GET /admin/v2/persistent/{tenant}/{namespace}``)."""
        return [str(t) for t in self.get(f"persistent/{namespace}") or []]

    def schemas(self, topic: str) -> dict[str, Any] | None:
        """Every version of ``topic``'s schema (Pulsar's ``GetAllVersionsSchemaResponse``,
        ``{getSchemaResponses: [{version, type, timestamp, data, properties}]}``); None when the
        topic has no schema (the REST API answers 404)."""
        t = TopicName.parse(topic)
        doc = self.get(
            f"schemas/{t.tenant}/{t.namespace}/{urllib.parse.quote(t.local_name, safe='')}/schemas", ok_missing=True
        )
        return dict(doc) if isinstance(doc, dict) else None

    def namespaces_of(self, tenant: str) -> list[str]:
        return [str(n) for n in self.get(f"namespaces/{tenant}") or []]

    def tenants(self) -> list[str]:
        return [str(t) for t in self.get("tenants") or []]
