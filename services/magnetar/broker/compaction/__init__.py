"""Topic compaction (Pulsar's): the compactor, the compacted view, read-compacted subscriptions.

``controller.TopicCompaction`` is one topic's compaction state and runs, ``compactor.compact`` the
two-phase compaction itself, ``view.CompactedView`` a compacted ledger read by original ids,
``reads`` what a read-compacted subscription does differently, ``monitor`` the automatic
compaction by ``compactionThreshold``, ``admin`` the REST routes.
"""
