"""The schema flags of ``magnetar standalone`` and ``magnetar broker`` (WIRE.md R124).

Pulsar's broker.conf settings in kebab case: ``--schema-compatibility-strategy`` (the last level of
the strategy after topic and namespace policies), ``--is-schema-validation-enforced`` and
``--is-allow-auto-update-schema-enabled``; config files use the broker.conf names
(cli/config_file.py). A strategy name is checked here so a typo stops the process at start.
"""

from __future__ import annotations

import argparse
from typing import Any

from magnetar.cli.flag_types import flag_bool
from magnetar.schema.info import CompatibilityStrategy


def _strategy(value: Any) -> str:
    try:
        return CompatibilityStrategy.parse(str(value)).name
    except Exception as exc:  # argparse reports a ValueError/TypeError as a usage error
        raise ValueError(str(exc)) from None


def add_schema_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schema-compatibility-strategy", type=_strategy, default="FULL")
    parser.add_argument("--is-schema-validation-enforced", type=flag_bool, nargs="?", const=True, default=False)
    parser.add_argument("--is-allow-auto-update-schema-enabled", type=flag_bool, nargs="?", const=True, default=True)


def schema_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``BrokerConfig`` keyword arguments from the flags of ``add_schema_flags``."""
    names = ("schema_compatibility_strategy", "is_schema_validation_enforced", "is_allow_auto_update_schema_enabled")
    return {name: getattr(args, name) for name in names}
