"""The client's background work: periodic stats, stopping background tasks, shutdown."""
