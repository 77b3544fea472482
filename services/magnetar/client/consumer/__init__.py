"""Consumers: partition consumers, acknowledgements, redelivery, batch receive, dead letters, topic lists."""
