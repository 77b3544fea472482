"""The bookie's scrubber flag (``magnetar bookie --scrub-interval``), apart from the shared parser.

BookKeeper calls it ``localScrubPeriod``: how often the bookie walks its whole storage verifying
every stored checksum, and hands what it finds to auto-recovery for repair (``bookie/scrub.py``).
"""

from __future__ import annotations

import argparse

DEFAULT_SCRUB_INTERVAL = 0.0  # off, as in BookKeeper (localScrubPeriod=0)


def add_scrub_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scrub-interval",
        type=float,
        default=DEFAULT_SCRUB_INTERVAL,
        help="seconds between scrubber passes that verify every stored entry's checksum and have "
        "damaged copies repaired from other replicas (BookKeeper's localScrubPeriod); 0 = off",
    )
