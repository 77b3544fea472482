"""``magnetar produce`` and ``magnetar consume``: send and read a few messages from a shell.

Meant for trying things out and for scripts, not for load (that is ``magnetar perf``). Both use
the asyncio client directly, since a command-line run owns its whole process and event loop.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from magnetar import event_loop
from magnetar.cli.client_security import add_client_security_flags, client_security
from magnetar.client import aio
from magnetar.client.options import ConsumerType, InitialPosition
from magnetar.protocol.errors import MagnetarError


async def _produce(args: argparse.Namespace) -> int:
    properties = dict(p.split("=", 1) for p in args.property or [])
    async with aio.Client(args.url, **client_security(args)) as client:
        producer = await client.create_producer(args.topic, batching_enabled=not args.no_batching)
        receipts = []
        for i in range(args.num_messages):
            text = args.message.replace("{i}", str(i))
            receipts.append(await producer.send_async(text.encode(), properties, args.key))
        await producer.flush()
        failed = 0
        for receipt in receipts:
            try:
                msg_id = await receipt
            except MagnetarError as exc:
                failed += 1
                print(f"failed: {exc!r}")
            else:
                if args.verbose:
                    print(f"sent {msg_id}")
        await producer.close()
    print(f"{len(receipts) - failed} messages produced to {args.topic}" + (f", {failed} failed" if failed else ""))
    return 0 if failed == 0 else 1


async def _consume(args: argparse.Namespace) -> int:
    received = 0
    async with aio.Client(args.url, **client_security(args)) as client:
        consumer = await client.subscribe(
            args.topic,
            args.subscription,
            consumer_type=ConsumerType(args.type),
            initial_position=InitialPosition(args.initial_position),
        )
        timeout_ms = int(args.timeout * 1000) if args.timeout > 0 else None
        try:
            while args.num_messages <= 0 or received < args.num_messages:
                msg = await consumer.receive(timeout_millis=timeout_ms)
                received += 1
                props = f" {msg.properties()}" if msg.properties() else ""
                key = f" key={msg.partition_key()}" if msg.partition_key() else ""
                try:
                    text = msg.data().decode()
                except UnicodeDecodeError:
                    text = repr(msg.data())
                mid = msg.message_id()  # ledger:entry:partition:batch, the form ``magnetar-admin`` takes
                where = f"{mid.ledger_id()}:{mid.entry_id()}:{mid.partition()}:{mid.batch_index()}"
                print(f"[{where}]{key}{props} {text}", flush=True)
                await consumer.acknowledge(msg)
        except MagnetarError as exc:  # Timeout: no more messages within --timeout
            print(f"stopped after {received} messages: {exc}")
        await consumer.close()
    return 0


def _quiet_client_notes() -> None:
    """Keep the client's INFO notes (each connection retry) off a shell user's screen unless they
    asked for a log level: the command's own outcome, or its one-line error, is what they wait for."""
    if "MAGNETAR_LOG_LEVEL" not in os.environ and not any(a.startswith("--log-level") for a in sys.argv):
        logging.getLogger("magnetar.client").setLevel(logging.WARNING)


def run_produce(args: argparse.Namespace) -> int:
    _quiet_client_notes()
    return event_loop.run(_produce(args))


def run_consume(args: argparse.Namespace) -> int:
    _quiet_client_notes()
    try:
        return event_loop.run(_consume(args))
    except KeyboardInterrupt:
        return 130


#: In a pod, the chart's NOTES (and a Job's env) set MAGNETAR_SERVICE_URL to the broker Service.
SERVICE_URL = os.environ.get("MAGNETAR_SERVICE_URL") or aio.DEFAULT_SERVICE_URL
URL_HELP = "service URL, magnetar://host:port (env MAGNETAR_SERVICE_URL)"


def add_client_commands(subparsers: Any) -> None:
    """Register ``produce`` and ``consume`` on the ``magnetar`` command's subparsers."""
    prod = subparsers.add_parser("produce", help="publish messages to a topic")
    prod.add_argument("topic")
    prod.add_argument("-m", "--message", default="message-{i}", help="message text ('{i}' becomes the message number)")
    prod.add_argument("-n", "--num-messages", type=int, default=1)
    prod.add_argument("-k", "--key", help="partition key")
    prod.add_argument("-p", "--property", action="append", metavar="K=V", help="message property (repeatable)")
    prod.add_argument("--no-batching", action="store_true")
    prod.add_argument("-v", "--verbose", action="store_true", help="print every message id")
    prod.add_argument("--url", default=SERVICE_URL, help=URL_HELP)
    add_client_security_flags(prod)
    prod.set_defaults(func=run_produce)

    cons = subparsers.add_parser("consume", help="receive, print and acknowledge messages")
    cons.add_argument("topic")
    cons.add_argument("-s", "--subscription", required=True)
    cons.add_argument("-n", "--num-messages", type=int, default=1, help="0: until interrupted")
    cons.add_argument("--type", choices=[t.value for t in ConsumerType], default="Exclusive")
    cons.add_argument("--initial-position", choices=["Latest", "Earliest"], default="Earliest")
    cons.add_argument("--timeout", type=float, default=0, help="give up after SECONDS without a message")
    cons.add_argument("--url", default=SERVICE_URL, help=URL_HELP)
    add_client_security_flags(cons)
    cons.set_defaults(func=run_consume)
