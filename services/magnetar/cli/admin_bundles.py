"""``magnetar-admin namespaces bundles | unload | split-bundle``, ``namespaces create --bundles`` and
``brokers shutdown``, with pulsar-admin's verbs and flags.

    magnetar-admin namespaces bundles <tenant/ns>
    magnetar-admin namespaces unload <tenant/ns> [-b <bundle> [-d <broker>]]
    magnetar-admin namespaces split-bundle <tenant/ns> -b <bundle> [-u] [-san range_equally_divide]
    magnetar-admin namespaces create <tenant/ns> [-b <count>]
    magnetar-admin brokers shutdown [-m <bundles per second>] [-f]

As pulsar-admin, ``--destinationBroker`` needs ``--bundle``; ``brokers shutdown`` drains and stops
the broker ``--admin-url`` names (not any broker behind a shared address).
"""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Callable
from typing import Any

from magnetar.broker.loadbalance.bundle_ranges import ALGORITHMS, InvalidBundle, parse_bundle

Request = Callable[..., Any]

NAMESPACE_VERBS = ("bundles", "unload", "split-bundle")


class BundleUsageError(ValueError):
    """A mistake in the command line, said in one line before anything is sent."""


def _subcommands(parser: argparse.ArgumentParser) -> Any:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise LookupError("parser has no subcommands")


def add_bundle_verbs(groups: Any) -> None:
    """Register the verbs on the ``namespaces`` and ``brokers`` groups (both already registered)."""
    n = _subcommands(groups.choices["namespaces"])
    n.add_parser("bundles", help="the namespace's bundles (BundlesData)").add_argument("name", help="tenant/namespace")
    sp = n.add_parser("unload", help="unload every bundle of the namespace, or one")
    sp.add_argument("name", help="tenant/namespace")
    sp.add_argument("-b", "--bundle", default=None, help="{start-boundary}_{end-boundary}")
    sp.add_argument(
        "-d", "--destinationBroker", dest="destination_broker", default=None, help="the broker to take the bundle"
    )
    sp = n.add_parser("split-bundle", help="split a bundle on the broker that owns it")
    sp.add_argument("name", help="tenant/namespace")
    sp.add_argument("-b", "--bundle", required=True, help="{start-boundary}_{end-boundary}")
    sp.add_argument("-u", "--unload", action="store_true", help="unload the two new bundles after the split")
    sp.add_argument(
        "-san",
        "--split-algorithm-name",
        dest="split_algorithm_name",
        default=None,
        help=f"one of {', '.join(ALGORITHMS)}; the broker's defaultNamespaceBundleSplitAlgorithm if absent",
    )
    n.choices["create"].add_argument("-b", "--bundles", type=int, default=None, help="number of bundles")
    b = _subcommands(groups.choices["brokers"])
    sp = b.add_parser("shutdown", help="drain this broker's bundles, then stop it")
    sp.add_argument(
        "-m",
        "--max-concurrent-unload-per-sec",
        dest="max_concurrent_unload_per_sec",
        type=int,
        default=0,
        help="bundles unloaded per second at most (0: no limit)",
    )
    sp.add_argument(
        "-f",
        "--forced-terminate-topic",
        dest="forced_terminate_topic",
        action="store_true",
        help="accepted, as pulsar-admin's: topics are always closed",
    )


def is_bundle_verb(group: str, action: str) -> bool:
    return (group == "namespaces" and action in NAMESPACE_VERBS) or (group == "brokers" and action == "shutdown")


def create_body(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``namespaces create`` body: Pulsar's Policies with ``bundles`` when ``--bundles`` is given."""
    count = getattr(args, "bundles", None)
    if count is None:
        return None
    if count <= 0:
        raise BundleUsageError("Invalid number of bundles. Number of bundles has to be in the range of (0, 2^32].")
    return {"bundles": {"numBundles": count}}


def _bundle(name: str) -> str:
    try:
        parse_bundle(name)
    except InvalidBundle as exc:
        raise BundleUsageError(
            f"{exc} (a bundle is {{start-boundary}}_{{end-boundary}}, e.g. 0x00000000_0x40000000)"
        ) from None
    return name


def run_bundle_verb(url: str, args: argparse.Namespace, request: Request) -> Any:
    """Run one verb; what it prints."""
    if args.group == "brokers":
        query = urllib.parse.urlencode(
            {
                "maxConcurrentUnloadPerSec": args.max_concurrent_unload_per_sec,
                "forcedTerminateTopic": str(args.forced_terminate_topic).lower(),
            }
        )
        return request(url, "POST", f"/admin/v2/brokers/shutdown?{query}", timeout=600)
    path = f"/admin/v2/namespaces/{args.name}"
    if args.action == "bundles":
        return request(url, "GET", path + "/bundles")
    if args.action == "unload":
        if args.bundle is None:
            if args.destination_broker:
                raise BundleUsageError("--destinationBroker cannot be set when --bundle is not specified.")
            return request(url, "PUT", path + "/unload", timeout=120)
        query = f"?{urllib.parse.urlencode({'destinationBroker': args.destination_broker})}"
        return request(url, "PUT", f"{path}/{_bundle(args.bundle)}/unload" + (query if args.destination_broker else ""))
    params = {"unload": str(args.unload).lower()}
    if args.split_algorithm_name:
        params["splitAlgorithmName"] = args.split_algorithm_name
    return request(url, "PUT", f"{path}/{_bundle(args.bundle)}/split?{urllib.parse.urlencode(params)}", timeout=120)
