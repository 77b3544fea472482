"""Staging and committing an export's Parquet files on any Hadoop filesystem.

Layout under the target (``file://``, ``hdfs://``, ``s3a://``... anything Hadoop's FileSystem
API opens; the moves and deletes go through that API in the JVM, so object stores work as well
as local disks)::

    <target>/date=YYYY-MM-DD/<run>-<n>.parquet        committed files (what readers see)
    <target>/_magnetar/<name>/staging/run=<run>/date=YYYY-MM-DD/part-*.parquet   Spark's output
    <target>/_magnetar/<name>/manifest.json            {run: [committed file paths]} while committing

Spark skips paths that start with ``_`` or ``.`` when it discovers a dataset, so
``spark.read.parquet(target)`` sees only committed files (with ``date`` as a partition column).

A run id (``export.run_id``) names one topic's slice of one export run and depends only on the
topic and the position it starts after, so a re-run of a crashed run has the same id. The
manifest is written before the first move and lists every destination, so a re-run can delete
exactly the files a crashed commit left behind without listing the whole target (which on an
object store with years of data would be slow).

One move is one ``FileSystem.rename`` of one file: atomic on a local disk and HDFS; on S3A a
copy then a delete, where the copy is a single PUT, so a destination is either absent or whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CommittedFile:
    run: str
    path: str
    size: int


class ParquetCommitter:
    """The staging area and the commit of the export ``name`` under ``target``."""

    def __init__(self, spark: Any, target: str, name: str) -> None:
        self.target = target.rstrip("/")
        self._jvm = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()
        root = self._path(self.target)
        self.fs = root.getFileSystem(self._conf)
        self.work = f"{self.target}/_magnetar/{name}"
        self.staging = f"{self.work}/staging"
        self.manifest = f"{self.work}/manifest.json"

    def _path(self, url: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(url)

    # ------------------------------------------------------------------ staging
    def clear_staging(self) -> None:
        """Drop whatever an earlier run left in staging (its files were never committed)."""
        path = self._path(self.staging)
        if self.fs.exists(path):
            self.fs.delete(path, True)

    def staged_files(self, run: str) -> list[tuple[str, str]]:
        """``(date directory name, file URL)`` of every Parquet file Spark staged for ``run``,
        in a fixed order (date, then Spark's file name)."""
        base = self._path(f"{self.staging}/run={run}")
        if not self.fs.exists(base):
            return []
        found = []
        for date_dir in self.fs.listStatus(base):
            if not date_dir.isDirectory():
                continue
            date = date_dir.getPath().getName()
            for f in self.fs.listStatus(date_dir.getPath()):
                fname = f.getPath().getName()
                if f.isFile() and fname.endswith(".parquet") and not fname.startswith((".", "_")):
                    found.append((date, f.getPath().toString()))
        return sorted(found)

    # ------------------------------------------------------------------ manifest
    def read_manifest(self) -> dict[str, list[str]]:
        """The manifest of a commit that did not finish (``{}`` when there is none; a manifest cut
        short by a crash while it was written also counts as none: no move had started)."""
        path = self._path(self.manifest)
        if not self.fs.exists(path):
            return {}
        stream = self.fs.open(path)
        try:
            raw = bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()
        try:
            doc = json.loads(raw.decode())
        except ValueError:
            return {}
        return {str(k): [str(p) for p in v] for k, v in doc.items()} if isinstance(doc, dict) else {}

    def write_manifest(self, moves: dict[str, list[tuple[str, str]]]) -> None:
        """Record every destination of ``moves`` (``plan_moves``) before the first move."""
        out = self.fs.create(self._path(self.manifest), True)
        try:
            out.write(bytearray(json.dumps({run: [dst for _, dst in pairs] for run, pairs in moves.items()}).encode()))
        finally:
            out.close()

    def drop_manifest(self) -> None:
        path = self._path(self.manifest)
        if self.fs.exists(path):
            self.fs.delete(path, False)

    # ------------------------------------------------------------------ discard and commit
    def discard(self, runs: Iterable[str]) -> int:
        """Delete the committed files of ``runs`` that a crashed commit left behind (as its manifest
        lists them); returns how many were deleted. Files of runs not named stay: their progress
        was committed, so they are the export's data now."""
        wanted = set(runs)
        deleted = 0
        for run, paths in self.read_manifest().items():
            if run not in wanted:
                continue
            for url in paths:
                path = self._path(url)
                if self.fs.exists(path):
                    self.fs.delete(path, False)
                    deleted += 1
        return deleted

    def plan_moves(self, runs: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
        """``{run: [(staged file, destination)]}``: the n-th staged file of run R (in
        ``staged_files`` order) goes to ``<target>/<date dir>/R-n.parquet``."""
        moves: dict[str, list[tuple[str, str]]] = {}
        for run in runs:
            moves[run] = [
                (src, f"{self.target}/{date}/{run}-{n}.parquet") for n, (date, src) in enumerate(self.staged_files(run))
            ]
        return moves

    def move(self, moves: dict[str, list[tuple[str, str]]]) -> list[CommittedFile]:
        """Move every staged file to its destination (``write_manifest`` first)."""
        done = []
        for run, pairs in moves.items():
            for src, dst in pairs:
                dst_path = self._path(dst)
                self.fs.mkdirs(dst_path.getParent())
                if self.fs.exists(dst_path):  # only from this very run (discard ran first): replace
                    self.fs.delete(dst_path, False)
                if not self.fs.rename(self._path(src), dst_path):
                    raise OSError(f"could not move {src} to {dst}")
                done.append(CommittedFile(run, dst, int(self.fs.getFileStatus(dst_path).getLen())))
        return done
