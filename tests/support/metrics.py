"""Reading a Prometheus ``/metrics`` endpoint in tests."""

from __future__ import annotations

import re
import urllib.request


def scrape(url: str, timeout: float = 5.0) -> str:
    """The text of a Prometheus ``/metrics`` endpoint."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


def samples(text: str, name: str) -> dict[str, float]:
    """``{first label value: value}`` of every sample of metric ``name`` (one-label metrics)."""
    out: dict[str, float] = {}
    for m in re.finditer(rf'^{re.escape(name)}\{{[a-z_]+="([^"]*)"[^}}]*\}} (\S+)$', text, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample of ``name`` whose labels are exactly ``labels`` (in any order), None
    when there is none."""
    for m in re.finditer(rf"^{re.escape(name)}\{{(.*)\}} (\S+)$", text, re.M):
        if dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))) == labels:
            return float(m.group(2))
    return None


def total(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels`` (an unlabelled sample
    counts when no labels are asked for); 0 when there is none."""
    out = 0.0
    for m in re.finditer(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", text, re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            out += float(m.group(2))
    return out
