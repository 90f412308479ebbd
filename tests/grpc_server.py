#!/usr/bin/env python3
"""A gRPC server not written here (grpcio, from PyPI) for tests/grpc.rs.

Serves demo.v1.Echo/Say (tests/data/echo.proto) with raw bytes: every call sleeps
--delay-ms, then answers an empty SayReply, except every --fail-every-th call, which ends
with --code (a grpc.StatusCode name). Prints "listening on PORT" once it serves, and on
SIGTERM the count of each status it sent ("sent OK=n CODE=m"), so the test knows the truth.
"""
import argparse
import signal
import sys
import threading
import time
from concurrent import futures

import grpc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--fail-every", type=int, default=0)
    ap.add_argument("--code", default="UNAVAILABLE")
    args = ap.parse_args()
    code = getattr(grpc.StatusCode, args.code)
    lock = threading.Lock()
    sent = {"OK": 0, args.code: 0}
    calls = [0]

    def say(request, context):
        if args.delay_ms > 0:
            time.sleep(args.delay_ms / 1000.0)
        with lock:
            calls[0] += 1
            fail = args.fail_every > 0 and calls[0] % args.fail_every == 0
            sent[args.code if fail else "OK"] += 1
        if fail:
            context.abort(code, "injected by tests/grpc_server.py")
        return b""

    handler = grpc.method_handlers_generic_handler(
        "demo.v1.Echo",
        {"Say": grpc.unary_unary_rpc_method_handler(say, request_deserializer=None, response_serializer=None)},
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    print(f"listening on {port}", flush=True)
    done.wait()
    server.stop(0.5).wait()
    print("sent " + " ".join(f"{k}={v}" for k, v in sent.items()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
