"""write_batch: flushes deferred inside a scope run once, in order, when it ends; per thread."""

from __future__ import annotations

import threading

from magnetar import write_batch


def test_flushes_run_at_the_end_of_the_outermost_scope_in_order() -> None:
    ran: list[str] = []
    assert not write_batch.defer(lambda: ran.append("outside")), "no scope: the caller schedules it"
    with write_batch.flushed_at_end():
        assert write_batch.defer(lambda: ran.append("a"))
        with write_batch.flushed_at_end():  # nested: joins the outer scope
            assert write_batch.defer(lambda: ran.append("b"))
        assert ran == []
    assert ran == ["a", "b"]
    assert not write_batch.defer(lambda: ran.append("after"))


def test_a_failing_flush_does_not_stop_the_others() -> None:
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    with write_batch.flushed_at_end():
        write_batch.defer(broken)
        write_batch.defer(lambda: ran.append("second"))
    assert ran == ["second"]


def test_a_scope_belongs_to_its_thread() -> None:
    """The blocking client's loop thread and a broker's loop may share a process: another
    thread's writes must not be flushed by this thread's scope."""
    seen: list[bool] = []
    with write_batch.flushed_at_end():
        other = threading.Thread(target=lambda: seen.append(write_batch.defer(lambda: None)))
        other.start()
        other.join()
    assert seen == [False]


def test_work_deferred_in_a_scope_may_defer_flushes_of_its_own_to_the_same_run() -> None:
    """The broker defers a dispatch behind the receipts' flushes; the dispatch's own write hands
    its flush to the run under way, which runs it last, still before the scope returns."""
    ran: list[str] = []

    def dispatch() -> None:
        ran.append("dispatch")
        assert write_batch.defer(lambda: ran.append("consumer flush"))

    with write_batch.flushed_at_end():
        write_batch.defer(lambda: ran.append("receipt flush"))
        write_batch.defer(dispatch)
    assert ran == ["receipt flush", "dispatch", "consumer flush"]
    assert not write_batch.defer(lambda: None)  # closed once the run is over
