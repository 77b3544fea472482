"""End-to-end encryption: the keys and codecs, and what a consumer does with an encrypted entry."""
