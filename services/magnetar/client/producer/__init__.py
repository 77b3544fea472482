"""Producers: partition producers, batching, routing, and how they start."""
