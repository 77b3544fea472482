"""Security pieces every server layer shares: token keys, JWT verification, credentials, TLS files.

Below the bookie, the ledger and the broker in the layers (pyproject's import-linter contract), so
that a bookie verifies tokens with exactly the code a broker does (``tokens.TokenVerifier``), and
the bookie's clients (broker, autorecovery, Spark jobs) read their credentials the same way
(``credentials.token_supplier``). Nothing here does I/O on import or holds state.
"""
