"""Namespace and topic policies: the model, quotas, backlog quotas, rates and TTL enforcement."""
