"""The binary-protocol server side: one client connection and its limits."""
