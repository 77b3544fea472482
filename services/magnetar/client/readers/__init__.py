"""Readers and table views: reading a topic without a subscription to keep."""
