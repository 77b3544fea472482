"""The broker's Prometheus metrics: its own counters and the per-topic families."""
