"""The load manager's pure parts: load reports, settings, placement, shedding and bundle splits.

Everything here is a function of load reports and settings, with no I/O, so the same code runs in
the leader broker and in ``scripts/simulate_load_balancer.py``."""
