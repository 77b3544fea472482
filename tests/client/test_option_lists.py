"""Each option list of the client is defined once (``magnetar.client.config``), and everything agrees with it.

The blocking facade's signatures, the asyncio client's and the config objects' are written out (so
that ``inspect.signature``, editors and mypy see real parameters); these tests prove that each
agrees with its list, name for name, in order and default for default, and that the blocking
facade hands every option to the asyncio client by name. Positional parameters must come in the
list's order; keyword-only ones are bound by name, so only their names and defaults are compared
(the asyncio ``Client`` lists its keywords in an order of its own).

The only default that differs between the flavours is the documented one: the asyncio
``create_producer`` blocks when the queue is full (``block_if_queue_full=True``). How Magnetar's
defaults differ from pulsar-client's (``batching_enabled``) is ``test_conformance.py``'s to check.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from magnetar.client import aio, sync
from magnetar.client.config.client import CLIENT_OPTIONS, ClientSettings
from magnetar.client.config.consumer import SUBSCRIBE_OPTIONS, ConsumerConfig
from magnetar.client.config.option_list import Flavour, OptionList, Place
from magnetar.client.config.producer import PRODUCER_OPTIONS
from magnetar.client.config.reader import READER_OPTIONS, TABLE_VIEW_OPTIONS
from magnetar.client.producer.config import ProducerConfig

# Set on a ``ConsumerConfig`` by the client after it is built: not options of ``subscribe``.
CONSUMER_CONFIG_HOOKS = {"producer_factory", "subscriber_factory"}

# (option list, flavour, what takes it); None: that flavour does not take the list.
TAKERS: dict[str, tuple[OptionList, dict[Flavour, Callable[..., Any] | None]]] = {
    "Client": (
        CLIENT_OPTIONS,
        {Flavour.BLOCKING: sync.Client, Flavour.ASYNCIO: aio.Client, Flavour.CONFIG: ClientSettings},
    ),
    "create_producer": (
        PRODUCER_OPTIONS,
        {
            Flavour.BLOCKING: sync.Client.create_producer,
            Flavour.ASYNCIO: aio.Client.create_producer,
            Flavour.CONFIG: ProducerConfig,
        },
    ),
    "subscribe": (
        SUBSCRIBE_OPTIONS,
        {
            Flavour.BLOCKING: sync.Client.subscribe,
            Flavour.ASYNCIO: aio.Client.subscribe,
            Flavour.CONFIG: ConsumerConfig,
        },
    ),
    "create_reader": (
        READER_OPTIONS,
        {Flavour.BLOCKING: sync.Client.create_reader, Flavour.ASYNCIO: aio.Client.create_reader, Flavour.CONFIG: None},
    ),
    "create_table_view": (
        TABLE_VIEW_OPTIONS,
        {Flavour.BLOCKING: sync.Client.create_table_view, Flavour.ASYNCIO: None, Flavour.CONFIG: None},
    ),
}

CASES = [
    pytest.param(call, flavour, id=f"{call}:{flavour.value}")
    for call, (_, takers) in TAKERS.items()
    for flavour in Flavour
]


def _parameters(taker: Callable[..., Any]) -> list[inspect.Parameter]:
    params = list(inspect.signature(taker).parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return [p for p in params if p.name not in CONSUMER_CONFIG_HOOKS or taker is not ConsumerConfig]


@pytest.mark.parametrize(("call", "flavour"), CASES)
def test_signature_agrees_with_its_option_list(call: str, flavour: Flavour) -> None:
    options, takers = TAKERS[call]
    taker = takers[flavour]
    listed = options.parameters(flavour)
    if taker is None:
        assert listed == [], f"{call}: the {flavour.value} flavour takes none of these options"
        return
    params = _parameters(taker)
    assert all(p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params), "real parameters, no *args/**kwargs"

    positional = [(p.name, p.default) for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    expected_positional = [(o.name, o.default_in(flavour)) for o in listed if o.place(flavour) is Place.POSITIONAL]
    assert positional == expected_positional

    keyword = {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}
    expected_keyword = {o.name: o.default_in(flavour) for o in listed if o.place(flavour) is Place.KEYWORD}
    assert keyword == expected_keyword


def test_only_the_documented_default_differs_between_the_flavours() -> None:
    differing = [(options.call, o.name) for options, _ in TAKERS.values() for o in options if o.differs]
    assert differing == [("create_producer", "block_if_queue_full")]
    option = PRODUCER_OPTIONS["block_if_queue_full"]
    assert (option.default_in(Flavour.BLOCKING), option.default_in(Flavour.ASYNCIO)) == (False, True)


def test_checks_come_from_the_option_list() -> None:
    """pulsar-client's ``ValueError`` for a wrong type, from the list's check of that option."""
    with pytest.raises(ValueError, match="Argument batching_enabled is expected to be of type 'bool'"):
        PRODUCER_OPTIONS.check({"topic": "t", "batching_enabled": "yes"})
    with pytest.raises(ValueError, match="message_listener must be callable"):
        SUBSCRIBE_OPTIONS.check({"topic": "t", "subscription_name": "s", "message_listener": 5})
    SUBSCRIBE_OPTIONS.check({"topic": "t"})  # an option the caller does not take is not checked


class _Forwarded(Exception):
    """Raised by the recording stand-ins below, with the keyword arguments they were called with."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        super().__init__("forwarded")
        self.kwargs = kwargs


def _sentinels(options: OptionList, flavour: Flavour) -> dict[str, object]:
    return {o.name: object() for o in options.parameters(flavour)}


def _call(taker: Callable[..., Any], options: OptionList, values: dict[str, object]) -> None:
    """Call ``taker`` with its positional options by position, in the list's order, and the rest by name."""
    positional = [values[o.name] for o in options.parameters(Flavour.BLOCKING) if o.blocking is Place.POSITIONAL]
    keyword = {o.name: values[o.name] for o in options.parameters(Flavour.BLOCKING) if o.blocking is Place.KEYWORD}
    taker(*positional, **keyword)


def _expected(options: OptionList, values: dict[str, object], **overrides: object) -> dict[str, object]:
    taken = {o.name for o in options.parameters(Flavour.ASYNCIO)}
    return {**{name: value for name, value in values.items() if name in taken}, **overrides}


def test_the_blocking_client_hands_every_client_option_to_the_asyncio_one_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def recording_client(*args: Any, **kwargs: Any) -> None:
        assert not args, "forwarded by position"
        raise _Forwarded(kwargs)

    monkeypatch.setattr(aio, "Client", recording_client)
    values = _sentinels(CLIENT_OPTIONS, Flavour.BLOCKING)
    with pytest.raises(_Forwarded) as forwarded:
        _call(sync.Client, CLIENT_OPTIONS, values)
    assert forwarded.value.kwargs == _expected(CLIENT_OPTIONS, values)


@pytest.mark.parametrize(
    ("method", "options", "overrides"),
    [
        ("create_producer", PRODUCER_OPTIONS, {"block_if_queue_full": True}),  # applied by the facade itself
        ("subscribe", SUBSCRIBE_OPTIONS, {}),
        ("create_reader", READER_OPTIONS, {"reader_listener": None}),  # run on the listener threads instead
    ],
)
def test_the_blocking_client_forwards_every_option_by_name(
    monkeypatch: pytest.MonkeyPatch, method: str, options: OptionList, overrides: dict[str, object]
) -> None:
    """Each option reaches the asyncio call under its own name, whatever its value: none can be swapped."""

    async def recording(*args: Any, **kwargs: Any) -> None:
        assert not args, "forwarded by position"
        raise _Forwarded(kwargs)

    monkeypatch.setattr(options, "check", lambda arguments: None)  # the sentinels are no valid values
    client = sync.Client("magnetar://127.0.0.1:1")
    try:
        monkeypatch.setattr(client._client, method, recording)
        values = _sentinels(options, Flavour.BLOCKING)
        with pytest.raises(_Forwarded) as forwarded:
            _call(getattr(client, method), options, values)
        assert forwarded.value.kwargs == _expected(options, values, **overrides)
    finally:
        client.close()
