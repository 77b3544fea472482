"""Sans-IO wire protocol: frames, commands, error codes, names and ids. No asyncio here."""
