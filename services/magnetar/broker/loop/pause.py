"""How long a long job on the broker's loop idles between two of its slices, and why.

A job that runs in slices (a ``/metrics`` render, closing thousands of transports) must return to
the loop between slices so that other tenants' frames get through. Going straight on
(``sleep(0)``, ``call_soon``) is not enough: a loop that always has a callback ready never waits
in its poll, so it never releases the GIL there. A thread on the publish path (the bookie's
writer, in standalone) then gets the GIL only when the interpreter forces a switch, once per
switch interval (5 ms), and it needs it several times per publish: every publish made meanwhile
takes about as long as the job. Idling ``PAUSE`` between slices lets that thread run at once.

Measured on the build machine with tests/faults/test_exhaustion.py (the quiet tenant's publish
p99): during three ``/metrics`` scrapes of 3,000 topics 52-117 ms (5 seeds) with ``sleep(0)`` and
4-8 ms (8 runs) with the pause; while 10,000 clients left at once, 41 ms (28-57) with
``call_soon`` and 15.5 ms (15-17) with the pause. The jobs take longer (a scrape 0.12 s instead of
0.06 s; closing 10,000 connections about 0.16 s more).
"""

from __future__ import annotations

PAUSE = 0.001  # seconds the loop idles between two slices of a long job
