"""The client's background work: the periodic statistics report, and shutting everything down at once."""
