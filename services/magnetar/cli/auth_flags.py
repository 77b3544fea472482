"""The authentication flags of ``magnetar standalone`` and ``magnetar broker`` (broker/auth/).

One flag per Pulsar broker.conf key, in its kebab-case spelling (``--token-secret-key`` for
``tokenSecretKey``; config files use the broker.conf names, cli/config_file.py). The settings are
checked as soon as they are parsed, by building the broker's providers: a missing or unreadable
key stops the process with one line instead of refusing every client later.
"""

from __future__ import annotations

import argparse
from typing import Any

from magnetar.cli.flag_types import flag_bool, flag_names


def add_auth_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--authentication-enabled", type=flag_bool, nargs="?", const=True, default=False)
    parser.add_argument(
        "--authentication-providers",
        type=flag_names,
        default=[],
        help="token, tls, basic or Pulsar's provider class names (comma-separated)",
    )
    parser.add_argument("--token-secret-key", default=None, help="file:///path or data:;base64,... (HS256)")
    parser.add_argument("--token-public-key", default=None, help="file:///path or data:;base64,... (RS256/ES256)")
    parser.add_argument("--token-auth-claim", default="sub", help="the claim naming the role")
    parser.add_argument("--token-public-alg", default="RS256")
    parser.add_argument("--super-user-roles", type=flag_names, default=[], help="roles that may do anything")
    parser.add_argument("--broker-client-authentication-plugin", default=None)
    parser.add_argument("--broker-client-authentication-parameters", default=None, help="token:<jwt> or file:///path")
    parser.add_argument("--authentication-refresh-check-seconds", type=float, default=60.0)
    parser.add_argument("--authenticate-metrics-endpoint", type=flag_bool, nargs="?", const=True, default=False)
    parser.add_argument(
        "--anonymous-user-role", default=None, help="the role of a client without credentials (default: refused)"
    )
    parser.add_argument(
        "--basic-auth-conf", default=None, help="htpasswd file for the basic provider: path, file:/data: URL or base64"
    )
    # Authorization (broker/authz/): only with authentication on.
    parser.add_argument("--authorization-enabled", type=flag_bool, nargs="?", const=True, default=False)
    parser.add_argument(
        "--authorization-allow-wildcards-matching", type=flag_bool, nargs="?", const=True, default=False
    )


def auth_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``BrokerConfig`` keyword arguments from the flags of ``add_auth_flags``."""
    names = (
        "authentication_enabled",
        "authentication_providers",
        "token_secret_key",
        "token_public_key",
        "token_auth_claim",
        "token_public_alg",
        "super_user_roles",
        "broker_client_authentication_plugin",
        "broker_client_authentication_parameters",
        "authentication_refresh_check_seconds",
        "authenticate_metrics_endpoint",
        "anonymous_user_role",
        "basic_auth_conf",
        "authorization_enabled",
        "authorization_allow_wildcards_matching",
    )
    return {name: getattr(args, name) for name in names}


def check_auth_settings(config: Any) -> None:
    """Build the providers and the broker's own token once; bad settings end the process."""
    from magnetar.broker.auth.broker_credentials import broker_token
    from magnetar.broker.auth.providers import Authentication
    from magnetar.broker.authz.checks import check_authorization_settings

    try:
        Authentication.from_config(config)
        broker_token(config)
        check_authorization_settings(config)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"magnetar: authentication settings: {exc}") from None
