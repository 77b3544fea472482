"""``magnetar-admin``'s credentials and TLS, with pulsar-admin's options.

- ``--auth-plugin`` takes Pulsar's class name ``org.apache.pulsar.client.impl.auth.AuthenticationToken``
  (or ``AuthenticationToken`` / ``token``); ``--auth-params`` is ``token:<jwt>``, ``file:///path``
  (re-read for every request, so a rotated token is picked up) or the bare JWT. With
  ``--auth-params`` alone the token plugin is assumed. Without flags, ``MAGNETAR_AUTH_TOKEN``
  (same forms) is used when set — pulsar-admin reads ``client.conf`` instead; an environment
  variable fits Kubernetes Secrets and CI better.
- ``--admin-url https://...`` is checked against ``--tls-trust-cert-path`` (the system's CAs when
  absent); ``--tls-allow-insecure`` accepts any certificate; the host name is checked only with
  ``--tls-enable-hostname-verification``, as pulsar-admin (whose default is off).

- ``--auth-plugin org.apache.pulsar.client.impl.auth.AuthenticationTls`` (or ``AuthenticationTls``
  / ``tls``) with ``--auth-params tlsCertFile:/path,tlsKeyFile:/path`` authenticates with a client
  certificate instead (mTLS, an ``https://`` admin URL): the broker's TLS provider takes the role
  from its CN, and no ``Authorization`` header is sent.

- ``--auth-plugin org.apache.pulsar.client.impl.auth.AuthenticationBasic`` (or ``AuthenticationBasic``
  / ``basic``) with ``--auth-params '{"userId": "...", "password": "..."}'`` (pulsar-admin's; the
  ``username`` key and ``userId:<name>,password:<secret>`` work too) sends
  ``Authorization: Basic`` for a broker with the Basic provider.

The token goes in ``Authorization: Bearer`` on every request; credentials are never printed.
"""

from __future__ import annotations

import argparse
import os
import ssl
from dataclasses import dataclass

from magnetar.client.net.auth import (
    BASIC_PLUGIN_NAMES,
    TLS_PLUGIN_NAMES,
    Authentication,
    AuthenticationTLS,
    basic_from_params,
    tls_from_params,
    token_from_params,
)
from magnetar.client.net.tls import TlsOptions
from magnetar.security.credentials import TOKEN_PLUGIN_NAMES

# The client's built-in plugin names (Java class name first, for messages), and the bare class name.
TOKEN_PLUGINS = (TOKEN_PLUGIN_NAMES[1], "AuthenticationToken", TOKEN_PLUGIN_NAMES[0])
TLS_PLUGINS = (TLS_PLUGIN_NAMES[1], "AuthenticationTls", TLS_PLUGIN_NAMES[0])
BASIC_PLUGINS = (BASIC_PLUGIN_NAMES[1], "AuthenticationBasic", BASIC_PLUGIN_NAMES[0])
ENV_TOKEN = "MAGNETAR_AUTH_TOKEN"


@dataclass(frozen=True, slots=True)
class HttpSecurity:
    """What every admin request needs: credentials and, for ``https://``, the TLS context."""

    token: Authentication | None = None  # the token or Basic credentials (TLS is in ``ssl_context``)
    ssl_context: ssl.SSLContext | None = None

    def headers(self) -> dict[str, str]:
        return {} if self.token is None else self.token.http_headers()


def add_auth_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--auth-plugin",
        default=None,
        help="org.apache.pulsar.client.impl.auth.AuthenticationToken | ...AuthenticationTls | ...AuthenticationBasic",
    )
    parser.add_argument(
        "--auth-params",
        default=None,
        help="token:<jwt> | file:///path (env MAGNETAR_AUTH_TOKEN) | tlsCertFile:<path>,tlsKeyFile:<path>",
    )
    parser.add_argument("--tls-trust-cert-path", default=None, help="CA certificate(s) for an https:// admin URL")
    parser.add_argument("--tls-allow-insecure", action="store_true", help="accept any broker certificate")
    parser.add_argument("--tls-enable-hostname-verification", action="store_true")


def credentials(plugin: str | None, params: str | None) -> Authentication | None:
    """The credentials ``--auth-plugin`` / ``--auth-params`` name, for ``magnetar-admin`` and
    ``magnetar``'s client commands alike: params alone are a token, no options at all mean
    ``MAGNETAR_AUTH_TOKEN`` when it is set, a name not listed here goes to the client's
    ``Authentication(name, params)``. ``ValueError`` for a bad pair."""
    if plugin is not None and not params:
        raise ValueError("--auth-plugin needs --auth-params (token:<jwt>, file:///path, tlsCertFile:...)")
    if not params:
        env = os.environ.get(ENV_TOKEN)
        return token_from_params(env) if env else None
    if plugin is None or plugin in TOKEN_PLUGINS:
        return token_from_params(params)
    if plugin in TLS_PLUGINS:
        return tls_from_params(params)
    if plugin in BASIC_PLUGINS:
        return basic_from_params(params)
    return Authentication(plugin, params)


def security_from_args(args: argparse.Namespace) -> HttpSecurity:
    """The ``HttpSecurity`` the flags (or ``MAGNETAR_AUTH_TOKEN``) ask for; ``SystemExit`` on a bad one."""
    plugin, params = args.auth_plugin, args.auth_params
    if plugin is not None and plugin not in TOKEN_PLUGINS + TLS_PLUGINS + BASIC_PLUGINS:
        raise SystemExit(
            f"magnetar-admin: unsupported --auth-plugin {plugin!r}; "
            f"use {TOKEN_PLUGINS[0]}, {TLS_PLUGINS[0]} or {BASIC_PLUGINS[0]}"
        )
    try:
        token = credentials(plugin, params)
    except ValueError as exc:
        raise SystemExit(f"magnetar-admin: {exc}") from None
    certificate: tuple[str, str] | None = None
    if isinstance(token, AuthenticationTLS):  # the certificate goes in the HTTPS handshake
        certificate, token = (token.certificate_path, token.private_key_path), None
        if not str(args.admin_url).startswith("https://"):
            raise SystemExit("magnetar-admin: AuthenticationTls needs an https:// --admin-url")
    context = None
    if str(args.admin_url).startswith("https://"):
        try:
            context = TlsOptions(
                args.tls_trust_cert_path,
                args.tls_allow_insecure,
                args.tls_enable_hostname_verification,
                *(certificate or (None, None)),
            ).context()
        except ValueError as exc:
            raise SystemExit(f"magnetar-admin: {exc}") from None
    return HttpSecurity(token, context)
