"""Credentials and TLS for ``magnetar produce`` / ``consume``, with pulsar-client's CLI options.

pulsar-client's tool takes ``--auth-plugin`` (a plugin class name), ``--auth-params`` (that
plugin's parameter string) and ``--tlsTrustCertsFilePath`` (the CA that signed the broker's
certificate), the same settings as ``client.conf``'s ``authPlugin``, ``authParams`` and
``tlsTrustCertsFilePath``. Here they are options of each command, beside ``--url``:

- the token plugin (``org.apache.pulsar.client.impl.auth.AuthenticationToken``, ``AuthenticationToken``
  or ``token``) takes ``token:<jwt>``, ``file:///path`` (read again for every connection) or the
  bare JWT; ``--auth-params`` alone means a token too, as for ``magnetar-admin``;
- the TLS plugin (``...AuthenticationTls``, ``AuthenticationTls``, ``tls``) takes
  ``tlsCertFile:<path>,tlsKeyFile:<path>`` and needs a ``magnetar+ssl://`` URL;
- the Basic plugin (``...AuthenticationBasic``, ``AuthenticationBasic``, ``basic``) takes
  ``{"userId": ..., "password": ...}`` or ``userId:<name>,password:<secret>``;
- any other name goes to the client's ``Authentication(name, params)``, which refuses what it does
  not know with one line rather than connecting without the credentials asked for.

``magnetar-admin`` reads the same options the same way (``admin_auth.credentials``).

Without these options ``MAGNETAR_AUTH_TOKEN`` (the same token forms) is used when set, as
``magnetar-admin`` does: an environment variable suits Kubernetes Secrets better than a file of
settings. The token is never printed.
"""

from __future__ import annotations

import argparse
from typing import Any

from magnetar.cli.admin_auth import ENV_TOKEN, credentials

__all__ = ["add_client_security_flags", "client_security"]


def add_client_security_flags(parser: argparse.ArgumentParser) -> None:
    """pulsar-client's authentication and TLS options, on a client command's parser."""
    parser.add_argument(
        "--auth-plugin",
        default=None,
        help="authentication plugin: org.apache.pulsar.client.impl.auth.AuthenticationToken | ...AuthenticationTls",
    )
    parser.add_argument(
        "--auth-params",
        default=None,
        help=f"token:<jwt> | file:///path | tlsCertFile:<path>,tlsKeyFile:<path> (env {ENV_TOKEN} for a token)",
    )
    parser.add_argument(
        "--tlsTrustCertsFilePath",
        "--tls-trust-cert-path",
        dest="tls_trust_certs_file_path",
        default=None,
        help="CA certificate(s) that signed the broker's certificate, for a magnetar+ssl:// URL",
    )
    parser.add_argument("--tls-allow-insecure", action="store_true", help="accept any broker certificate")
    parser.add_argument("--tls-enable-hostname-verification", action="store_true")


def client_security(args: argparse.Namespace) -> dict[str, Any]:
    """``Client`` keyword arguments from the options of ``add_client_security_flags``."""
    return {
        "authentication": credentials(args.auth_plugin, args.auth_params),
        "tls_trust_certs_file_path": args.tls_trust_certs_file_path,
        "tls_allow_insecure_connection": args.tls_allow_insecure,
        "tls_validate_hostname": args.tls_enable_hostname_verification,
    }
