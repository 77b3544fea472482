"""The bookie: durable entry storage (LMDB, group commit), its TCP server and its clients.

See ``STORAGE.md`` for the on-disk layout and the group-commit design. Import the concrete
modules (``storage``, ``server``, ``service``, ...) directly; this package exports nothing so
that importing a client does not pull in the server.
"""
