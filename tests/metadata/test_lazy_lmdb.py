"""An etcd-only broker does not load LMDB.

LMDB is the embedded store of standalone mode and the bookie's ledger storage; a broker in a
cluster talks to etcd and to bookies over TCP and needs neither. The check runs in a fresh
interpreter, since the test process itself has imported the LMDB store long before.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

ETCD_BROKER_MODULES = [
    "magnetar.metadata.etcd_store",
    "magnetar.metadata.url",
    "magnetar.broker.service",
    "magnetar.bookie.tcp_client",
]


def test_the_etcd_store_url_and_broker_service_do_not_import_lmdb() -> None:
    script = textwrap.dedent(
        f"""
        import importlib, sys
        for name in {ETCD_BROKER_MODULES!r}:
            importlib.import_module(name)
        loaded = sorted(m for m in ("lmdb", "magnetar.metadata.lmdb_store") if m in sys.modules)
        print(",".join(loaded))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    loaded = [m for m in done.stdout.strip().split(",") if m]
    assert "lmdb" not in loaded, f"importing {ETCD_BROKER_MODULES} loaded LMDB"
    assert "magnetar.metadata.lmdb_store" not in loaded, f"importing {ETCD_BROKER_MODULES} loaded the LMDB store"
