"""BookKeeper-style replicated ledgers: see PROTOCOL.md in this folder for the rules."""
