"""Sharing the broker's event loop: long jobs in slices and how they yield, transports closed in batches.

``pause`` is how long a sliced job idles between slices, ``closing`` closes the transports of
clients that left a bounded number per loop turn. Both know only asyncio, so anything in the broker
may use them: the service owns the closing queue, the connection feeds it, and the ``/metrics``
render pauses between slices.
"""
