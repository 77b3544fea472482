"""Small programs written as a pulsar-client 3.x user writes them, run with ``import magnetar as pulsar``.

``test_conformance.py`` checks names and signatures; this module checks behaviour. Each program
below is a complete script in pulsar-client's idiom: it imports ``magnetar as pulsar`` (the one line
a user changes), talks to a real standalone and asserts what the same script asserts under Pulsar.
It runs in a process of its own, so that nothing of the test's own interpreter (a loop, a thread,
an import) can make it pass, and so that a thread left running after ``client.close()`` shows.

One program per theme: producing, consuming and acknowledging, seeking, argument checks,
authentication objects, schemas, the client's lifecycle, encryption.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import pytest
from tests.support.standalone import StandaloneProcess

PRELUDE = """
import os, threading, time, uuid
import magnetar as pulsar

URL = os.environ["SERVICE_URL"]
ADMIN = os.environ["ADMIN_URL"]
def unique(name):
    return f"persistent://public/default/{name}-{uuid.uuid4().hex[:10]}"
"""


def run_program(standalone: StandaloneProcess, body: str) -> None:
    """Run one program against ``standalone``; it must exit 0 and print ``ok`` last."""
    source = PRELUDE + textwrap.dedent(body) + '\nprint("ok")\n'
    env = dict(os.environ, SERVICE_URL=standalone.service_url, ADMIN_URL=standalone.admin_url)
    done = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"program failed:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip().splitlines()[-1] == "ok", done.stdout


PRODUCING = """
client = pulsar.Client(URL)
topic = unique("producing")
producer = client.create_producer(topic, batching_enabled=False)

# Fire and forget: no callback, positionally and by name.
producer.send_async(b"a", None)
producer.send_async(b"b", callback=None)
producer.flush()
try:
    producer.send_async(b"c", 5)
except TypeError:
    pass
else:
    raise AssertionError("a callback that is not callable must be a TypeError")

# Custom sequence ids: last_sequence_id() follows what was sent, resends included.
seq_producer = client.create_producer(unique("sequence"), batching_enabled=False)
for sid in (0, 1, 2, 1, 2):
    seq_producer.send(b"x", sequence_id=sid)
assert seq_producer.last_sequence_id() == 2, seq_producer.last_sequence_id()

# A second Exclusive producer is fenced off.
exclusive = unique("exclusive")
first = client.create_producer(exclusive, access_mode=pulsar.ProducerAccessMode.Exclusive)
try:
    client.create_producer(exclusive, access_mode=pulsar.ProducerAccessMode.Exclusive)
except pulsar.ProducerFenced:
    pass
else:
    raise AssertionError("a second Exclusive producer must raise ProducerFenced")
first.close()

consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
got = [consumer.receive(10000).data() for _ in range(2)]
assert got == [b"a", b"b"], got
client.close()
"""

CONSUMING = """
client = pulsar.Client(URL)
t1, t2 = unique("multi-a"), unique("multi-b")
consumer = client.subscribe([t1, t2], "sub")
client.create_producer(t1).send(b"one")
client.create_producer(t2).send(b"two")
seen = []
for _ in range(2):
    msg = consumer.receive(10000)
    consumer.acknowledge(msg.message_id())  # the id knows its topic
    seen.append(msg.data())
assert sorted(seen) == [b"one", b"two"], seen
try:
    consumer.acknowledge(pulsar.MessageId.earliest)  # an id of no topic
except pulsar.OperationNotSupported:
    pass
else:
    raise AssertionError("acknowledging an id without a topic must raise OperationNotSupported")
client.close()
"""

SEEKING = """
client = pulsar.Client(URL)
topic = unique("seek")
producer = client.create_producer(topic, batching_enabled=False)
ids = [producer.send(f"m{i}".encode()) for i in range(5)]

consumer = client.subscribe(topic, "after", initial_position=pulsar.InitialPosition.Earliest)
consumer.seek(ids[2])
assert consumer.receive(10000).data() == b"m3"  # after the message sought

inclusive = client.subscribe(
    topic, "inclusive", initial_position=pulsar.InitialPosition.Earliest, start_message_id_inclusive=True
)
inclusive.seek(ids[2])
assert inclusive.receive(10000).data() == b"m2"  # the message sought itself

reader = client.create_reader(topic, pulsar.MessageId.earliest)
assert reader.read_next(10000).data() == b"m0"
reader.seek(pulsar.MessageId.latest)  # resolved by the broker now
producer.send(b"after-seek")
assert reader.has_message_available()
assert reader.read_next(10000).data() == b"after-seek"
client.close()
"""

ARGUMENTS = """
def value_error(make):
    try:
        make()
    except ValueError:
        return
    raise AssertionError("expected ValueError")

value_error(lambda: pulsar.Client(URL, use_tls="x"))
value_error(lambda: pulsar.Client(URL, tls_trust_certs_file_path=5))
value_error(lambda: pulsar.Client(URL, tls_allow_insecure_connection="x"))

client = pulsar.Client(URL)
def overlapping_sticky_ranges():
    policy = pulsar.ConsumerKeySharedPolicy(
        key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 100), (50, 150)]
    )
    client.subscribe(unique("sticky"), "sub", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=policy)
value_error(overlapping_sticky_ranges)
value_error(lambda: client.create_producer(unique("chunks"), batching_enabled=True, chunking_enabled=True))
client.create_producer(unique("chunks"), chunking_enabled=True).close()  # default batching gives way

class Provider(pulsar.ServiceInfoProvider):
    def initial_service_info(self):
        return pulsar.ServiceInfo(URL)
    def initialize(self, on_update):
        pass
    def close(self):
        pass
value_error(lambda: pulsar.Client(Provider(), authentication=pulsar.AuthenticationToken("t")))
value_error(lambda: pulsar.Client(Provider(), tls_trust_certs_file_path="/tmp/ca.pem"))

class BadProvider(Provider):
    def initial_service_info(self):
        return URL  # a string, not a ServiceInfo
value_error(lambda: pulsar.Client(BadProvider()))

policy = pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=3)
assert policy.dead_letter_topic == "" and policy.initial_subscription_name == "", policy.dead_letter_topic

try:
    pulsar.schema.Record().anything = 1
except AttributeError:
    pass
else:
    raise AssertionError("the bare Record base class must refuse fields")
client.close()
"""

AUTHENTICATION = """
def failing_supplier():
    raise RuntimeError("token store unreachable")

client = pulsar.Client(URL, authentication=pulsar.AuthenticationToken(failing_supplier))
try:
    client.create_producer(unique("auth"))
except pulsar.AuthenticationError as err:
    assert "token store unreachable" in str(err), str(err)
else:
    raise AssertionError("a token supplier that raises must give AuthenticationError")
client.close()

auth = pulsar.Authentication("org.apache.pulsar.client.impl.auth.AuthenticationToken", "token:abc")
assert auth is not None
pulsar.Authentication("token", "token:abc")
pulsar.Authentication("basic", '{"userId": "u", "password": "p"}')
"""

SCHEMAS = """
from magnetar.schema import AvroSchema, Record, String

class User(Record):
    name = String()

class Customer(Record):  # the same record under another class name
    name = String()

client = pulsar.Client(URL)
topic = unique("schema")
producer = client.create_producer(topic, schema=AvroSchema(User))
producer.send(User(name="ada"))
for info in (AvroSchema(User).schema_info(), client.get_schema_info(topic)):
    assert str(info.schema_type()).upper().endswith("AVRO"), info.schema_type()
    assert '"name"' in info.schema() and isinstance(info.name(), str), info.schema()
    assert isinstance(info.properties(), dict), info.properties()

import json, urllib.request
path = "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy"
req = urllib.request.Request(ADMIN + path, data=json.dumps("FULL").encode(), method="PUT",
                             headers={"Content-Type": "application/json"})
urllib.request.urlopen(req).read()
renamed = client.create_producer(topic, schema=AvroSchema(Customer))  # evolves under FULL
renamed.send(Customer(name="bob"))
consumer = client.subscribe(topic, "sub", schema=AvroSchema(Customer), initial_position=pulsar.InitialPosition.Earliest)
assert consumer.receive(10000).value().name == "ada"  # written by the old class, read by the new
client.close()
"""

LIFECYCLE = """
updates = []

class Provider(pulsar.ServiceInfoProvider):
    closed = False
    def initial_service_info(self):
        return pulsar.ServiceInfo("pulsar://127.0.0.1:1")  # nothing listens there
    def initialize(self, on_update):
        updates.append("initialized")
        on_update(pulsar.ServiceInfo(URL))  # applies at once
    def close(self):
        Provider.closed = True

provider = Provider()
client = pulsar.Client(provider, operation_timeout_seconds=10)
assert updates == ["initialized"], updates  # initialize ran in the constructor
producer = client.create_producer(unique("lifecycle"))
producer.send(b"x")
client.close()
assert Provider.closed
others = [t for t in threading.enumerate() if t is not threading.main_thread()]
assert not others, others

def forgotten():
    c = pulsar.Client(URL)
    c.create_producer(unique("forgotten")).send(b"y")
forgotten()
import gc
gc.collect()
deadline = time.monotonic() + 10
while [t for t in threading.enumerate() if t is not threading.main_thread()] and time.monotonic() < deadline:
    time.sleep(0.05)
others = [t for t in threading.enumerate() if t is not threading.main_thread()]
assert not others, others
"""

ENCRYPTION = """
import tempfile
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
folder = tempfile.mkdtemp()
public, private = os.path.join(folder, "pub.pem"), os.path.join(folder, "priv.pem")
with open(public, "wb") as f:
    f.write(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
with open(private, "wb") as f:
    f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))
reader = pulsar.CryptoKeyReader(public, private)
client = pulsar.Client(URL)
topic = unique("encrypted")
consumer = client.subscribe(topic, "sub", crypto_key_reader=reader)
client.create_producer(topic, encryption_key="app", crypto_key_reader=reader).send(b"secret")
msg = consumer.receive(10000)
assert msg.data() == b"secret"
context = msg.encryption_context()
assert context is not None and context.algorithm() == "", context.algorithm()
client.close()
"""

PROGRAMS = {
    "producing": PRODUCING,
    "consuming": CONSUMING,
    "seeking": SEEKING,
    "arguments": ARGUMENTS,
    "authentication": AUTHENTICATION,
    "schemas": SCHEMAS,
    "lifecycle": LIFECYCLE,
    "encryption": ENCRYPTION,
}


@pytest.mark.parametrize("theme", sorted(PROGRAMS))
def test_pulsar_program(standalone: StandaloneProcess, theme: str) -> None:
    run_program(standalone, PROGRAMS[theme])


def test_a_failing_program_fails(standalone: StandaloneProcess) -> None:
    """The harness itself: a program whose assertion fails must fail the test."""
    with pytest.raises(AssertionError, match="program failed"):
        run_program(standalone, f"assert False, {uuid.uuid4().hex!r}")
