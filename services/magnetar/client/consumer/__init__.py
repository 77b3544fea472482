"""Consumers: the merged consumer and its partition consumers (split by concern: permits, acks,
redelivery and dead letters, chunked messages, seek), the blocking receivers woken by delivery,
batch receive, dead letter topics, topic lists and patterns."""
