"""``magnetar-jobs``: the Spark jobs (``export``, ``retention-sweep``) on a local Spark.

For people without Kubernetes: the same command line as the SparkApplication's
(``magnetar.jobs.main``), plus ``--master`` (default ``local[2]``: two executor threads in one JVM;
any Spark master URL works, e.g. ``spark://host:7077``). Needs the ``spark`` extra and a Java 17.
``--auth-plugin``/``--auth-params`` (as ``pulsar-admin``'s) give the job a token for brokers and
bookies with authentication on, and ``--tls-trust-cert-path`` the CA of TLS bookies; they are
handed on through the environment (``MAGNETAR_AUTH_TOKEN``/``MAGNETAR_AUTH_TOKEN_FILE``,
``MAGNETAR_TLS_TRUST_CERTS_FILE``, jobs/credentials.py), which the local Spark's Python workers
inherit.

    magnetar-jobs export --admin-url http://localhost:8080 \
        --topic persistent://public/default/orders --target /data/orders
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from magnetar.jobs.credentials import TLS_TRUST_ENV, TOKEN_ENV, TOKEN_FILE_ENV
from magnetar.jobs.main import build_parser, execute


def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--master", default="local[2]", help="Spark master URL (default: local[2])")
    p.add_argument("--auth-plugin", default=None, help="token (or Pulsar's AuthenticationToken class name)")
    p.add_argument("--auth-params", default=None, help="token:<jwt> or file:///path")
    p.add_argument("--tls-trust-cert-path", default=None, help="CA (PEM) of TLS bookies and an https:// admin URL")
    return p


def _export_credentials(plugin: str | None, params: str | None) -> None:
    """Put ``--auth-params`` where the driver and the executors both look (the environment)."""
    if not params:
        return
    from magnetar.security.credentials import TOKEN_PLUGIN_NAMES

    if plugin and plugin not in TOKEN_PLUGIN_NAMES:
        raise SystemExit(f"magnetar-jobs: --auth-plugin {plugin!r} is not supported (supported: token)")
    text = params.strip()
    if text.startswith("file:"):
        os.environ[TOKEN_FILE_ENV] = text
    else:
        os.environ[TOKEN_ENV] = text[len("token:") :] if text.startswith("token:") else text


def _export_trust(path: str | None) -> None:
    """``--tls-trust-cert-path``, handed on like the token (jobs/credentials.py)."""
    if path:
        os.environ[TLS_TRUST_ENV] = path


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return build_parser("magnetar-jobs", common=_common()).parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    _export_credentials(args.auth_plugin, args.auth_params)
    _export_trust(args.tls_trust_cert_path)

    def session(app: str) -> Any:
        from magnetar.jobs.session import local_session

        return local_session(app, master=args.master)

    return execute(args, session)


if __name__ == "__main__":
    sys.exit(main())
