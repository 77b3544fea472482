"""Subscriptions: cursor, consumers, dispatchers per type, delayed delivery, cursor moves."""
