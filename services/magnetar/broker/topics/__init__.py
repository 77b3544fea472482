"""Topics this broker serves: persistent and non-persistent, loading, producers, deduplication."""
