"""Producers: the public producer and its partition producers (split by concern: the send path and
batching, receipts and timeouts), producer options, chunking, routing, and how they start."""
