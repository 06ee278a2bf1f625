"""Start moto's server with DynamoDB requests applied one at a time.

moto_server handles each request on its own thread and its DynamoDB backend has no
locking, so two concurrent conditional writes to one item can both pass their condition
(measured here: 64 racing PutItems with attribute_not_exists(pk) let two through about
once in 12 800; 200 concurrent `ADD n :one` updates ended at 199). Real DynamoDB applies
writes to an item atomically, and that atomicity is what this project relies on, so this
launcher restores it: DynamoDB requests are serialized with one lock, everything else
(SQS long polls included) stays concurrent. It is moto itself, unchanged otherwise.

usage: python3 motoserver.py [-H HOST] [-p PORT]
"""
import argparse
import signal
import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple


def serialize_dynamodb(app):
    lock = threading.Lock()

    def wrapped(environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            with lock:
                # Produce the whole response inside the lock.
                return list(app(environ, start_response))
        return app(environ, start_response)

    return wrapped


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=4566)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, serialize_dynamodb(app), threaded=True)


if __name__ == "__main__":
    main()
