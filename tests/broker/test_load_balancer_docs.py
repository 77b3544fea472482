"""The load-balancing page's settings table names every load-balancer setting the broker takes, so
a setting added later without a line on the page fails here."""

from __future__ import annotations

import re
from pathlib import Path

from magnetar.broker.loadbalance.settings import keys

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operating" / "load-balancing.md"


def test_every_setting_has_a_row() -> None:
    text = PAGE.read_text()
    table = text[text.index("\n## Settings\n") :]
    rows = set(re.findall(r"^\| `([A-Za-z]+)` \|", table, flags=re.M))
    assert rows == set(keys()), (sorted(set(keys()) - rows), sorted(rows - set(keys())))
