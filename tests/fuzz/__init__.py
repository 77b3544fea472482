"""Fuzzers on every input Magnetar reads from outside (issue 13, scenario 7), marker ``fuzz``.

Targets, one module each:

- ``test_frames.py``: the frame codec (``protocol/framing.py``) and the batch/entry decoders, in
  process: raw bytes, mutated frame streams, and round trips of valid frames (Hypothesis).
- ``test_broker.py``: every command handler of the broker, over real TCP against a real
  ``magnetar standalone``: well-formed and mutated commands, before and after ``connect``, in any
  order; then the topics are read back to show no refused message was stored.
- ``test_bookie.py``: every ``bk_*`` handler of a real bookie (the standalone's) over TCP; then
  every add is read back to show no refused add was stored.
- ``test_admin.py``: the bodies and query parameters of every POST/PUT route of the admin REST API.
- ``test_operator.py``: the operator's pure spec checks and translations (Tenant, Namespace, Topic,
  BookieEnsemble), in process.

How many inputs: ``FUZZ_EXAMPLES`` per target (default 2000: the whole package costs well under two
minutes of CI). Inputs are produced in bulk by a seeded ``random.Random`` (and Hypothesis for the
structured round trips), many frames per connection and several connections at once, so that a long
run reaches a million inputs per target in minutes rather than days. ``FUZZ_SEED=N`` replays a run
(the seed is printed; by default it is random). Each target prints ``FUZZ <target>: N inputs in
S s (R/s)`` and appends the same figures as a JSON line to ``$FUZZ_REPORT`` when that is set.

Short (CI)::

    python3 -m pytest tests/fuzz -m fuzz -p no:cacheprovider

Long (a million inputs per target; one target at a time, in the background)::

    FUZZ_EXAMPLES=1000000 FUZZ_TIMEOUT=14400 FUZZ_REPORT=/tmp/fuzz.jsonl \\
        python3 -m pytest tests/fuzz/test_broker.py -m fuzz -p no:cacheprovider -s > /tmp/fuzz-broker.log 2>&1 &
"""
