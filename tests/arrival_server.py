#!/usr/bin/env python3
"""A target that writes down when each request arrived (tests/run.rs, Poisson arrivals).

Stdlib only. `arrival_server.py FILE`: listens on 127.0.0.1 port 0 (HTTP/1.1 keep-alive, a
thread per connection), answers every request `200` with an empty body, and appends the
instant its request line arrived (`time.monotonic_ns()`, one per line) to FILE. Prints
`listening 127.0.0.1:PORT` on stdout. Every read has a timeout; it ends when killed.
"""

import socket
import sys
import threading
import time

OUT = open(sys.argv[1], "a", buffering=1)
LOCK = threading.Lock()
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def serve(conn):
    conn.settimeout(120)
    buf = b""
    with conn:
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            now = time.monotonic_ns()
            buf += data
            # Bodyless GETs: each request ends at its blank line.
            while b"\r\n\r\n" in buf:
                _, buf = buf.split(b"\r\n\r\n", 1)
                with LOCK:
                    OUT.write(f"{now}\n")
                conn.sendall(ANSWER)


def main():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(1024)
    print(f"listening 127.0.0.1:{s.getsockname()[1]}", flush=True)
    while True:
        conn, _ = s.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


main()
