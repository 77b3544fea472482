"""Reaching brokers: connections, lookup, reconnection, service URLs and failover, TLS, authentication."""
