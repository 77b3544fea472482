"""The binary-protocol server side: one client connection (its transport and its commands) and its limits."""
