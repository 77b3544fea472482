"""``magnetar-jobs``: the Spark jobs (``export``, ``retention-sweep``) on a local Spark.

For people without Kubernetes: the same command line as the SparkApplication's
(``magnetar.jobs.main``), plus ``--master`` (default ``local[2]``: two executor threads in one JVM;
any Spark master URL works, e.g. ``spark://host:7077``). Needs the ``spark`` extra and a Java 17.

    magnetar-jobs export --admin-url http://localhost:8080 \
        --topic persistent://public/default/orders --target /data/orders
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from magnetar.jobs.main import build_parser, execute


def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--master", default="local[2]", help="Spark master URL (default: local[2])")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser("magnetar-jobs", common=_common()).parse_args(argv)

    def session(app: str) -> Any:
        from magnetar.jobs.session import local_session

        return local_session(app, master=args.master)

    return execute(args, session)


if __name__ == "__main__":
    sys.exit(main())
