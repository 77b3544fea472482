"""Fault-injection tests on a real local cluster, in the manner of Jepsen's queue workload (issue 3 part 7).

- ``tests/support/cluster.py``: ``LocalCluster`` (etcd, bookies, brokers as processes on free
  loopback ports; ``Proc.kill9/stop/pause/resume/restart``; direct etcd metadata reads).
- ``workload.py``: producers send unique values, every send logged ok / fail / unknown; live
  consumers; a final drain from a subscription created before the run.
- ``checker.py``: lost, duplicated, reordered (per producer, on first occurrences), inconsistent
  (one position, two values), unexpected. ``test_checker.py`` checks it on hand-made histories.
- ``nemesis.py``: picking victims (ensemble bookies, the owning broker), waiting on conditions
  with deadlines, and ``record()`` of figures (printed, and appended as JSON lines to the file
  named by ``FAULTS_REPORT``).
- ``test_*.py`` marked ``faults``: the scenarios.

Run them one at a time or all together (each starts its own cluster; about 3 minutes in all)::

    FAULTS_REPORT=/tmp/faults.jsonl python -m pytest tests/faults -m faults -s --basetemp /tmp/faults

``--basetemp`` keeps every process log (``<test>/cluster/logs/*.log``) and the full history
(``<test>/cluster/history.json``) of the last run out of pytest's rotating temp directories.
"""
