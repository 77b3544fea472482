"""The blocking facade's machinery: the loop thread, how a blocking call waits, listener threads.

Only the blocking facade (``sync`` and its ``sync_*`` modules) imports it: an import-linter contract.
"""
