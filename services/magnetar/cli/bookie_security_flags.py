"""Flags for data-plane security: a bookie's authentication and TLS, and any process's credentials
and TLS as a bookie client (bookie/auth.py, bookie/client_security.py; WIRE.md R80-R86).

One flag per setting, the kebab-case spelling of its config-file key (cli/config_file.py): the
bookie's own side uses the broker's names (``authenticationEnabled``, ``tokenSecretKey``,
``superUserRoles``, ``tlsCertificateFilePath``...) plus ``tlsEnabled``; the client side uses
Pulsar's broker.conf names ``bookkeeperClientAuthentication*`` / ``bookkeeperTLS*``, on the broker
(its writes) and on the bookie (autorecovery's copies between bookies). Settings are checked
when parsed, so a bad key or file ends the process with one line.
"""

from __future__ import annotations

import argparse
from typing import Any

from magnetar.bookie.auth import BookieSecurity
from magnetar.bookie.client_security import BookieClientSecurity
from magnetar.cli.flag_types import flag_bool, flag_names

CLIENT_SETTINGS = (
    "bookkeeper_client_authentication_plugin",
    "bookkeeper_client_authentication_parameters",
    "bookkeeper_tls_trust_certs_file_path",
    "bookkeeper_tls_certificate_file_path",
    "bookkeeper_tls_key_file_path",
    "bookkeeper_tls_client_authentication",
)


def add_bookkeeper_client_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bookkeeper-client-authentication-plugin", default=None, help="token")
    parser.add_argument(
        "--bookkeeper-client-authentication-parameters", default=None, help="token:<jwt> or file:///path"
    )
    parser.add_argument("--bookkeeper-tls-trust-certs-file-path", default=None, help="CA of the bookies: TLS on")
    parser.add_argument("--bookkeeper-tls-certificate-file-path", default=None)
    parser.add_argument("--bookkeeper-tls-key-file-path", default=None)
    parser.add_argument("--bookkeeper-tls-client-authentication", type=flag_bool, nargs="?", const=True, default=False)


def add_bookie_server_flags(parser: argparse.ArgumentParser) -> None:
    """The bookie's own side; ``add_bookkeeper_client_flags`` is added too (autorecovery)."""
    parser.add_argument("--authentication-enabled", type=flag_bool, nargs="?", const=True, default=False)
    parser.add_argument("--authentication-providers", type=flag_names, default=[], help="token")
    parser.add_argument("--token-secret-key", default=None, help="file:///path or data:;base64,... (HS256)")
    parser.add_argument("--token-public-key", default=None, help="file:///path (RS256/ES256)")
    parser.add_argument("--token-public-alg", default="RS256")
    parser.add_argument("--token-auth-claim", default="sub")
    parser.add_argument("--super-user-roles", type=flag_names, default=[], help="only these roles may use the bookie")
    parser.add_argument("--tls-enabled", type=flag_bool, nargs="?", const=True, default=False)
    parser.add_argument("--tls-certificate-file-path", default=None)
    parser.add_argument("--tls-key-file-path", default=None)
    parser.add_argument("--tls-trust-certs-file-path", default=None, help="CA of client certificates")
    parser.add_argument(
        "--tls-require-trusted-client-cert-on-connect", type=flag_bool, nargs="?", const=True, default=False
    )
    add_bookkeeper_client_flags(parser)


def bookkeeper_client_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``BrokerConfig`` keyword arguments from ``add_bookkeeper_client_flags``."""
    return {name: getattr(args, name) for name in CLIENT_SETTINGS}


def client_security(settings: Any) -> BookieClientSecurity:
    """The bookie-client security of a ``BrokerConfig`` or a parsed namespace (same attribute names)."""
    return BookieClientSecurity.from_config(settings)


def bookie_security(args: argparse.Namespace) -> BookieSecurity:
    return BookieSecurity(
        authentication_enabled=args.authentication_enabled,
        authentication_providers=args.authentication_providers,
        token_secret_key=args.token_secret_key,
        token_public_key=args.token_public_key,
        token_public_alg=args.token_public_alg,
        token_auth_claim=args.token_auth_claim,
        super_user_roles=args.super_user_roles,
        tls_enabled=args.tls_enabled,
        tls_certificate_file_path=args.tls_certificate_file_path,
        tls_key_file_path=args.tls_key_file_path,
        tls_trust_certs_file_path=args.tls_trust_certs_file_path,
        tls_require_trusted_client_cert_on_connect=args.tls_require_trusted_client_cert_on_connect,
    )


def checked(build: Any, *args: Any) -> Any:
    """``build(*args)``, with bad settings (keys, token files, TLS files) ending the process."""
    try:
        result = build(*args)
        if isinstance(result, BookieSecurity):  # decode the key, load the TLS files now
            result.authenticator()
            result.ssl_context()
        return result
    except (ValueError, OSError) as exc:
        raise SystemExit(f"magnetar: bookie security settings: {exc}") from None
