"""The `magnetar-operator` entry point: kopf over all namespaces, like `kopf run -A`.

Why a console script at all: the operator image needs one command, and it should not depend on
kopf's CLI flags. Peering (several operator replicas, one active) is on when MAGNETAR_PEERING
names a KopfPeering resource; otherwise the operator runs standalone.
"""

from __future__ import annotations

import argparse
import os

import kopf

import magnetar_operator  # noqa: F401  (registers the handlers)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="magnetar-operator", description="Magnetar's Kubernetes operator (kopf; all namespaces by default)."
    )
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="watch only these namespaces (default: all namespaces)",
    )
    parser.add_argument(
        "--liveness",
        default=os.environ.get("MAGNETAR_LIVENESS_ENDPOINT"),
        help="serve kopf's liveness probe here, e.g. http://0.0.0.0:8081/healthz",
    )
    parser.add_argument("--verbose", "-v", action="store_true")
    args = parser.parse_args(argv)
    # kopf's own log setup: the same format as `kopf run`, with the object's namespace/name.
    kopf.configure(verbose=args.verbose, log_prefix=True)
    peering = os.environ.get("MAGNETAR_PEERING")
    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        standalone=not peering,
        peering_name=peering or None,
        liveness_endpoint=args.liveness,
    )


if __name__ == "__main__":
    main()
