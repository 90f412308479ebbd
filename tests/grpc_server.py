#!/usr/bin/env python3
"""A gRPC server not written here (grpcio, from PyPI) for tests/grpc.rs.

Serves demo.v1.Echo/Say (tests/data/echo.proto) with raw bytes: every call sleeps
--delay-ms, then answers an empty SayReply, except every --fail-every-th call, which ends
with --code (a grpc.StatusCode name). Prints "listening on PORT" once it serves, and on
SIGTERM the count of each status it sent ("sent OK=n CODE=m"), so the test knows the truth.

With --reflect FILE (a .proto under --proto-root), it also serves gRPC server reflection
(grpcio-reflection) for the services FILE defines, from descriptors compiled with
grpcio-tools' protoc, and decodes each request with them: on SIGTERM it prints the first
request as JSON ("first {...}"), so the test sees what the loader encoded.

With --tls DIR it serves TLS instead (ALPN h2, grpcio's own), with a certificate for
127.0.0.1 that openssl writes to DIR/cert.pem (the client's --cacert) and DIR/key.pem.
"""
import argparse
import json
import os
import signal
import sys
import threading
import time
from concurrent import futures

import grpc


def reflected(root, proto):
    """A descriptor pool of `proto` (and its imports) and the services it defines."""
    import tempfile
    from importlib import resources

    from google.protobuf import descriptor_pb2, descriptor_pool
    from grpc_tools import protoc

    well_known = str(resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "set.pb")
        rc = protoc.main(["protoc", f"-I{root}", f"-I{well_known}", "--include_imports",
                          f"--descriptor_set_out={out}", os.path.join(root, proto)])
        if rc != 0:
            raise SystemExit(f"protoc failed on {proto}: {rc}")
        with open(out, "rb") as f:
            files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:  # --include_imports lists imports first
        pool.Add(file)
    services = [f"{file.package}.{s.name}" for file in files.file if file.name == proto for s in file.service]
    return pool, services


def tls_credentials(out):
    """A self-signed end-entity certificate for 127.0.0.1 (openssl), as server credentials."""
    import subprocess

    os.makedirs(out, exist_ok=True)
    conf = os.path.join(out, "ee.cnf")
    with open(conf, "w") as f:
        f.write("[req]\ndistinguished_name = dn\nx509_extensions = ee\nprompt = no\n[dn]\nCN = 127.0.0.1\n"
                "[ee]\nbasicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature\n"
                "extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1\n")
    key, cert = os.path.join(out, "key.pem"), os.path.join(out, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-config", conf, "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert, "-days", "2"],
                   check=True, capture_output=True)
    with open(key, "rb") as k, open(cert, "rb") as c:
        return grpc.ssl_server_credentials([(k.read(), c.read())])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--fail-every", type=int, default=0)
    ap.add_argument("--code", default="UNAVAILABLE")
    ap.add_argument("--reflect", help="serve reflection for this .proto (relative to --proto-root)")
    ap.add_argument("--proto-root", default=".")
    ap.add_argument("--tls", help="serve TLS with a certificate written to this directory")
    args = ap.parse_args()
    pool, services, first = None, [], []
    decode = None
    if args.reflect:
        from google.protobuf import json_format, message_factory

        pool, services = reflected(args.proto_root, args.reflect)
        request_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("demo.v1.SayRequest"))

        def decode(raw):
            return json_format.MessageToDict(request_class.FromString(raw))
    code = getattr(grpc.StatusCode, args.code)
    lock = threading.Lock()
    sent = {"OK": 0, args.code: 0}
    calls = [0]

    def say(request, context):
        if decode is not None and not first:
            first.append(decode(request))
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
    if pool is not None:
        from grpc_reflection.v1alpha import reflection

        reflection.enable_server_reflection(services + [reflection.SERVICE_NAME], server, pool=pool)
    if args.tls:
        port = server.add_secure_port("127.0.0.1:0", tls_credentials(args.tls))
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    print(f"listening on {port}", flush=True)
    done.wait()
    server.stop(0.5).wait()
    print("sent " + " ".join(f"{k}={v}" for k, v in sent.items()), flush=True)
    if first:
        print("first " + json.dumps(first[0], sort_keys=True), flush=True)


if __name__ == "__main__":
    sys.exit(main())
