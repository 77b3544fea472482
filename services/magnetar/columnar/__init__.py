"""Messages as columns: the rows of stored entries in the Arrow shape the Spark data source and the
offloaded ledger objects share.

A package of its own, low in the layers (it needs only the protocol and pyarrow), because both the
top layer (the Spark jobs) and the storage layers (ledger offload) build the same rows: one
definition keeps a ledger read by Spark from the bookies and the same ledger read back from the
object store identical, column by column.
"""
