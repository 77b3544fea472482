"""Bookie auto-recovery: the cluster re-replicates the ledgers of lost or drained bookies by itself.

Every bookie process (``BookieService(autorecovery=True)``) takes part; the pieces talk to each
other only through the metadata store, so any process can take any role and a crash loses nothing
but the work in flight (the manner of BookKeeper's auditor and replication workers):

- ``auditor``: the elected auditor. One candidate per bookie; the one holding the ephemeral
  ``/bookies/auditor`` key watches ``/bookies/available`` and, after a grace period, marks every
  ledger of a bookie that stayed away under-replicated. A periodic full audit is the safety net
  for lost watch events.
- ``replication``: the replication workers. One per bookie; a worker locks a marked ledger, copies
  each fragment's entries from a surviving replica to a replacement bookie, swaps the replacement
  into the ledger's metadata by compare-and-set, then clears the marker. Only closed ledgers.
- ``underreplication``: the under-replication markers (``/underreplicated/{ledger}``), the worker
  locks and the decommission flags, with the pure rules (which bookies count as missing, which
  entries a slot holds) and the store helpers that auditor, workers and decommission share.
- ``decommission``: the decommission drain. Flags a live bookie, marks its ledgers and waits for
  the workers to move them away, so the bookie can then be removed.
- ``admin_ops``: the bookie operations the broker's admin API exposes (list the bookies, forget a
  removed one), as plain functions on a ``MetadataStore``.

Nothing is imported here: a caller imports the module it needs (the broker, for instance, needs
the markers and the drain but not the workers).
"""
