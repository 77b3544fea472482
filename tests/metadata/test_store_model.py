"""A stateful model check: random put / CAS / create / delete sequences against a dict.

Hypothesis drives one store per run and compares every outcome (value, error type, children)
with a plain dict model, so the CAS rules are checked on interleavings nobody would write by hand.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from magnetar.metadata.store import ANY_VERSION, MUST_NOT_EXIST, MetadataStore
from magnetar.protocol.errors import BadVersion, NotFound

from .conftest import StoreBackend

PATHS = st.sampled_from(["/a", "/a/b", "/a/c", "/ab", "/a/b/c", "/z"])
VALUES = st.binary(max_size=8)
MODES = st.sampled_from(["any", "create", "current", "stale"])


def _outcome(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
    try:
        return loop.run_until_complete(coro)
    except (BadVersion, NotFound) as exc:
        return type(exc)


def make_machine(backend: StoreBackend) -> type[RuleBasedStateMachine]:
    class StoreModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.store: MetadataStore = self.loop.run_until_complete(backend.fresh())
            self.model: dict[str, tuple[bytes, int]] = {}

        def _expected(self, path: str, mode: str) -> int:
            if mode == "any":
                return ANY_VERSION
            if mode == "create":
                return MUST_NOT_EXIST
            current = self.model.get(path)
            if mode == "current":
                return current[1] if current else 0
            return current[1] + 7 if current else 12345

        @rule(path=PATHS, value=VALUES, mode=MODES)
        def put(self, path: str, value: bytes, mode: str) -> None:
            expected = self._expected(path, mode)
            current = self.model.get(path)
            ok = (
                expected == ANY_VERSION
                or (expected == MUST_NOT_EXIST and current is None)
                or (current is not None and expected == current[1])
            )
            result = _outcome(self.loop, self.store.put(path, value, expected))
            if ok:
                assert not isinstance(result, type), result
                if current is not None:
                    assert result.version > current[1]
                self.model[path] = (value, result.version)
            else:
                assert result is BadVersion

        @rule(path=PATHS, mode=st.sampled_from(["any", "current", "stale"]))
        def delete(self, path: str, mode: str) -> None:
            expected = self._expected(path, mode)
            current = self.model.get(path)
            result = _outcome(self.loop, self.store.delete(path, expected))
            if current is None:
                assert result is NotFound
            elif expected in (ANY_VERSION, current[1]):
                assert result is None
                del self.model[path]
            else:
                assert result is BadVersion

        @invariant()
        def matches_model(self) -> None:
            for path in ["/a", "/a/b", "/a/c", "/ab", "/a/b/c", "/z"]:
                got = self.loop.run_until_complete(self.store.get(path))
                want = self.model.get(path)
                assert (got.value, got.version) == want if got else want is None
            kids = self.loop.run_until_complete(self.store.children("/a"))
            assert kids == sorted({p.split("/")[2] for p in self.model if p.startswith("/a/")})

        def teardown(self) -> None:
            self.loop.run_until_complete(self.store.close())
            self.loop.close()

    return StoreModel


def test_store_matches_a_dict_model(backend: StoreBackend) -> None:
    run_state_machine_as_test(
        make_machine(backend),
        settings=settings(
            max_examples=25, stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )
