"""The binary-protocol server side: one client connection, its limits, closing, listeners."""
