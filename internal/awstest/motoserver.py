"""Start moto's server with DynamoDB requests applied one at a time.

moto_server handles each request on its own thread and its DynamoDB backend has no
locking, so two concurrent conditional writes to one item can both pass their condition
(measured here: 64 racing PutItems with attribute_not_exists(pk) let two through about
once in 12 800; 200 concurrent `ADD n :one` updates ended at 199). Real DynamoDB applies
writes to an item atomically, and that atomicity is what this project relies on, so this
launcher restores it: DynamoDB requests are serialized with one lock, everything else
(SQS long polls included) stays concurrent.

It also makes moto's SQS message clock cheaper: moto recomputes every queue's message
counts on each attribute access by asking, for every message, whether it is visible,
and each of those questions builds two datetime objects. A FIFO send reads the queue's
attributes several times, so sending slowed to 16 messages/s at 1 000 queued and 5/s at
2 000 (measured here). The patch answers the same questions from time.time(), with the
same result.

And it makes moto's TransactWriteItems cost what the transaction touches: moto deep-copies
every table a transaction names before applying it, to roll back on failure, so each
transaction cost grew with table size (12 records/s at 2 000 records here). The patch keeps
copies of just the items the transaction names and puts those back on failure, which is
what the rollback needs; with DynamoDB requests serialized, nothing else can change them
in between. The tests that cancel transactions (a lost lease, a failed business condition)
check that nothing of a cancelled transaction remains.

Its SQS backend has no locking either: a delete rebuilds the queue's message list while
receives mark messages in flight and sends append to it. Found here in a 10 000-payment
run: a receive marked a message in flight while a delete (with an older receipt handle of
the same message) removed it, so the message's FIFO group stayed "in flight" for good and
340 messages of the queue could no longer be received; a send that lands during the
rebuild can be dropped the same way. The patch applies SQS's message operations one at a
time too, and runs a long poll as short receives under the lock with pauses outside it.

And moto can hand out a FIFO group's messages out of order. A message stays in its
"pending" set (in flight) until a receive walks past it visible again; a receive that meets
the first message of a group visible, while a later one of the group is still marked
pending although its visibility also ran out, skips the first, then unmarks the later one
and delivers it. That happens when a group's in-flight messages come back at different
times (one moved to its lease end with ChangeMessageVisibility, the rest of the failed
batch at the runner's retry delay), and here it let a changed payload under a payment's
key be applied before the payment itself. SQS keeps a group's order: no message of a group
is returned while an earlier one is in flight. The patch unmarks every message whose
visibility ran out before each receive looks at the queue.

And it takes out work moto repeats on every request without changing its answers (measured
here on the duplicate storm, two runs each: moto's CPU per request from 8.5 and 7.9 ms to
7.3 and 6.0 ms; moto's CPU is what limits how many tests can share one): the request
dispatcher lists moto's package directory (a listdir and a stat per entry) to find the
backend of each request, and the method names of the request's response class (an
inspect.getmembers over the class, a sixth of a trivial request); camelCase names are
converted to snake_case with a character loop each time, about 70 times per SQS request
(a queue's attributes are all rebuilt for each one read); a GetQueueAttributes naming
attributes rebuilds all of them three times per name; and each message sent or received
reads the queue's retention period by rebuilding all its attributes. The patch caches the
directory listing, the method names and the name conversions (pure functions of their
input), and the backend found for each host name; builds the attributes once per
GetQueueAttributes; and reads the retention period from the queue itself, the value the
attributes carry.

And moto forgets a FIFO deduplication id as soon as its message is deleted, where SQS
remembers it for 5 minutes: a receipt resent by a consumer that took over a crashed one's
key reached the receipts queue twice once the first copy had been read. The patch keeps
each id for the 5 minutes.

With --exit-with-parent it exits when the process that started it is gone, so that a
test binary killed before its cleanup (go test's timeout, a SIGKILL) leaves no moto
running. internal/awstest and localstack/with-local-aws.sh start it so.

usage: python3 motoserver.py [-H HOST] [-p PORT] [--exit-with-parent]
"""
import argparse
import faulthandler
import os
import signal
import sys
import threading
import time

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug import serving
from werkzeug.serving import run_simple


def cheaper_sqs_clock():
    from moto.sqs import models

    models.Message.visible = property(lambda m: time.time() * 1000.0 > m.visible_at)
    models.Message.delayed = property(lambda m: time.time() * 1000.0 < m.delayed_until)


def item_level_transaction_rollback():
    import copy

    from moto.dynamodb import models
    from moto.dynamodb.exceptions import (
        MockValidationException,
        MultipleTransactionsException,
        TransactionCanceledException,
    )

    class NoTableCopy:
        """Stands in for the copy module inside transact_write_items: tables are not
        copied (the item-level backup below replaces that), everything else is."""

        @staticmethod
        def deepcopy(x, memo=None):
            if isinstance(x, models.Table):
                return x
            return copy.deepcopy(x, memo)

    original = models.DynamoDBBackend.transact_write_items

    def transact_write_items(self, transact_items):
        saved = []
        for item in transact_items:
            op_type, op = next(iter(item.items()))
            table = self.tables.get(op.get("TableName"))
            if table is None:
                continue
            if op_type == "Put":
                attrs = op.get("Item", {})
                key = {table.hash_key_attr: attrs.get(table.hash_key_attr)}
                if table.range_key_attr:
                    key[table.range_key_attr] = attrs.get(table.range_key_attr)
            else:
                key = op.get("Key", {})
            try:
                current = self.get_item(table.name, key)
            except Exception:  # an invalid key: the transaction fails on it anyway
                continue
            saved.append((table.name, key, copy.deepcopy(current.to_json()["Attributes"]) if current else None))
        models.copy = NoTableCopy
        try:
            return original(self, transact_items)
        except (TransactionCanceledException, MultipleTransactionsException, MockValidationException):
            for name, key, attrs in reversed(saved):
                if attrs is None:
                    if self.get_item(name, key) is not None:
                        self.delete_item(name, key)
                else:
                    self.put_item(name, attrs)
            raise
        finally:
            models.copy = copy

    models.DynamoDBBackend.transact_write_items = transact_write_items


def cheaper_dispatch():
    import functools

    from moto import backends
    from moto.core import responses, utils
    from moto.moto_server import werkzeug_app
    from moto.sqs import models

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
    backend_for_host = functools.lru_cache(maxsize=1024)(werkzeug_app.DomainDispatcherApplication.get_backend_for_host)
    werkzeug_app.DomainDispatcherApplication.get_backend_for_host = backend_for_host

    convert = functools.lru_cache(maxsize=4096)(utils.camelcase_to_underscores)
    for module in (utils, responses, models):
        module.camelcase_to_underscores = convert
    responses.method_names_from_class = functools.lru_cache(maxsize=256)(utils.method_names_from_class)

    def get_queue_attributes(self, queue_name, attribute_names):
        queue = self.get_queue(queue_name)
        if not attribute_names:
            return {}
        valid_names = ["All"] + queue.BASE_ATTRIBUTES + queue.FIFO_ATTRIBUTES + queue.KMS_ATTRIBUTES
        invalid_name = next((name for name in attribute_names if name not in valid_names), None)
        if invalid_name or invalid_name == "":
            raise models.InvalidAttributeName(invalid_name)
        everything = queue.attributes
        if "All" in attribute_names:
            return everything
        return {name: everything[name] for name in attribute_names
                if name in everything and everything[name] is not None}

    models.SQSBackend.get_queue_attributes = get_queue_attributes

    def is_message_valid_based_on_retention_period(self, queue_name, message):
        queue = self.get_queue(queue_name)
        retain_until = queue.message_retention_period + message.sent_timestamp / 1000
        return retain_until > utils.unix_time()

    models.SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period


def serialize_sqs():
    from moto.sqs import models

    lock = threading.RLock()
    backend = models.SQSBackend

    def locked(name):
        orig = getattr(backend, name)

        def wrapped(self, *args, **kwargs):
            with lock:
                return orig(self, *args, **kwargs)

        setattr(backend, name, wrapped)

    for name in ("send_message", "send_message_batch", "delete_message", "delete_message_batch",
                 "change_message_visibility", "change_message_visibility_batch", "purge_queue",
                 "get_queue_attributes", "delete_queue"):
        locked(name)

    orig_receive = backend.receive_message

    def release_expired(self, queue_name):
        """Unmark the in-flight messages whose visibility ran out (see fifo order above)."""
        queue = self.get_queue(queue_name)
        for message in [m for m in queue.pending_messages if m.visible]:
            queue.pending_messages.discard(message)

    def receive_message(self, queue_name, count, wait_seconds_timeout, visibility_timeout,
                        message_attribute_names=None):
        deadline = time.time() + (wait_seconds_timeout or 0)
        while True:
            with lock:
                release_expired(self, queue_name)
                got = orig_receive(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
            if got or time.time() >= deadline:
                return got
            time.sleep(0.05)

    backend.receive_message = receive_message


def fifo_dedup_window():
    """SQS drops a FIFO message whose deduplication id was seen in the last 5 minutes, even
    when the first message was received and deleted meanwhile. moto only compares with the
    messages still in the queue, so a message deleted quickly (a consumer that keeps up)
    lets its duplicate through. Remember each id for the 5 minutes, as SQS does."""
    from moto.sqs import models

    orig = models.Queue.add_message
    window_ms = 5 * 60 * 1000

    def add_message(self, message):
        dedup = message.deduplication_id
        if self.fifo_queue and dedup:
            seen = self.__dict__.setdefault("_dedup_window", {})
            now = message.sent_timestamp or time.time() * 1000
            first = seen.get(dedup)
            if first is not None and now - first < window_ms:
                return
            if len(seen) > 10000:  # forget what is out of the window
                for k in [k for k, t in seen.items() if now - t >= window_ms]:
                    del seen[k]
            seen[dedup] = now
        return orig(self, message)

    models.Queue.add_message = add_message


def serialize_dynamodb(app):
    lock = threading.Lock()

    def wrapped(environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            with lock:
                # Produce the whole response inside the lock.
                return list(app(environ, start_response))
        return app(environ, start_response)

    return wrapped


def exit_with_parent():
    """Exit when the process that started this one is gone: a test binary killed (go
    test's timeout, a SIGKILL) runs no cleanup, and its moto would be left running."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=4566)
    parser.add_argument("--exit-with-parent", action="store_true")
    args = parser.parse_args()
    if args.exit_with_parent:
        exit_with_parent()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stack dump for debugging
    cheaper_sqs_clock()
    cheaper_dispatch()
    serialize_sqs()
    fifo_dedup_window()
    item_level_transaction_rollback()
    app = DomainDispatcherApplication(create_backend_app)
    # werkzeug listens with a backlog of 128: the tests' racers (64 goroutines on each of
    # 4 keys at once) and the packages make test runs side by side open more connections
    # at once than that.
    serving.BaseWSGIServer.request_queue_size = 4096
    run_simple(args.host, args.port, serialize_dynamodb(app), threaded=True)


if __name__ == "__main__":
    main()
