"""Command-line entry points: ``magnetar`` and ``magnetar-admin``."""
