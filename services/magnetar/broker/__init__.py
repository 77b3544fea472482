"""The broker: sessions, topics, producers, subscriptions, admin REST and metrics."""
