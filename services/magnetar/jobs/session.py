"""Spark sessions for the jobs, with the ``magnetar`` data source registered.

A Python data source lives in the session that registers it (``spark.dataSource.register``), not
in the JVM's service registry, so every entry point — the jobs' ``main``, ``magnetar-jobs``, the
tests — goes through ``register`` before reading ``format("magnetar")``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def register(spark: Any) -> Any:
    """Register the ``magnetar`` format on ``spark``; returns ``spark`` for chaining."""
    from magnetar.jobs.source import MagnetarDataSource, enable_pushdown

    spark.dataSource.register(MagnetarDataSource)
    # The reader implements pushFilters, which Spark 4 refuses unless Python data source pushdown is
    # switched on for the session.
    return enable_pushdown(spark)


def local_session(app_name: str, *, master: str = "local[2]", warehouse: str | Path | None = None) -> Any:
    """A local Spark (the CLI's and the tests' way to run the jobs without a cluster manager).

    Its Python workers run this interpreter, which has the project installed; the UI is off (no
    port to collide on a shared machine) and shuffles use few partitions (the jobs shuffle little).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if warehouse is not None:
        builder = builder.config("spark.sql.warehouse.dir", str(warehouse))
    return register(builder.getOrCreate())


def cluster_session(app_name: str) -> Any:
    """The session of a job started by ``spark-submit`` (master and resources come from it)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
    return register(builder.getOrCreate())
