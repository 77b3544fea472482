"""Health, readiness, metrics and the HTTP lookup: what load balancers, probes and scrapers ask.

``GET /admin/v2/brokers/health`` answers ``ok`` while the process serves, ``GET /ready`` only once
the broker service has started (503 before), ``GET /metrics`` the broker's Prometheus families with
the per-topic ones, and ``GET /lookup/v2/topic/persistent/...`` the broker that owns a topic, as
``pulsar-admin topics lookup`` asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from magnetar.broker.admin.forwarding import proxy
from magnetar.broker.admin.requests import topic_name
from magnetar.broker.metrics import topics as topic_metrics

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


def add_health_routes(app: web.Application, service: BrokerService) -> None:
    """Register health, readiness, the HTTP lookup and ``/metrics`` on the admin ``app``."""
    routes = HealthRoutes(service)
    r = app.router
    r.add_get("/admin/v2/brokers/health", routes.health)
    r.add_get("/ready", routes.ready)
    r.add_get("/lookup/v2/topic/persistent/{tenant}/{ns}/{topic}", routes.lookup_topic)
    r.add_get("/metrics", routes.metrics)


class HealthRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    async def health(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    async def ready(self, request: web.Request) -> web.StreamResponse:
        if not self.service.ready:
            return web.Response(text="not ready", status=503)
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        body = generate_latest(self.service.metrics.registry)
        for reg in self.service.extra_registries:
            body += generate_latest(reg)
        # Per-topic families: read from the loaded topics and rendered in slices, with the loop
        # idle between them (metrics/topics.py).
        svc = self.service
        families = await topic_metrics.collect(list(svc.topics.items()), list(svc.non_persistent.topics.items()))
        body += await topic_metrics.render(families)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def lookup_topic(self, request: web.Request) -> web.StreamResponse:
        """Pulsar's HTTP lookup (``pulsar-admin topics lookup``): the broker that owns the topic.

        Like the binary lookup it assigns an unowned bundle; a broker that is not the one to own it
        asks the chosen broker over HTTP, so the answer is always the owner itself."""
        name = topic_name(request)
        # R111: Pulsar's listenerName query parameter or X-Pulsar-ListenerName header
        listener = request.query.get("listenerName") or request.headers.get("X-Pulsar-ListenerName") or None
        own = self.service.ownership
        if own is None:  # standalone: this broker serves everything
            web_url = self.service.web_url
            url, url_tls = self.service.own_lookup_urls(listener)
        else:
            info, redirect = await own.lookup(name)
            if redirect:
                return await proxy(self.service, "GET", info.web_url + request.path_qs)
            web_url = info.web_url
            url, url_tls = info.lookup_urls(listener)
        answer = {"brokerUrl": url, "nativeUrl": url, "httpUrl": web_url}
        if url_tls:
            answer["brokerUrlTls"] = url_tls
        return web.json_response(answer)
