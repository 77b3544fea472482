"""Every client, producer and consumer option, each list defined once, and the argument checks."""
