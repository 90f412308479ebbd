#!/usr/bin/env python3
"""A target whose ceiling is a worker pool, with its own Prometheus exporter (tests/watch.rs).

Stdlib only (Python 3.11). `pool_server.py WORKERS SERVICE_MS [EXPORTER_LIFETIME_S]`:

- listens on 127.0.0.1 port 0 for the load (HTTP/1.1 keep-alive, one thread per
  connection); each request takes one of WORKERS slots for SERVICE_MS (a sleep: the pool,
  not the CPU, is the ceiling: WORKERS / SERVICE_MS requests a second), queueing for a slot
  when all are busy;
- serves Prometheus text on a second port at /metrics: `pool_busy_workers` (a gauge:
  slots taken now, averaged over the last 200 ms of 10 ms samples so one scrape sees the
  second's level), `pool_max_workers`, `pool_requests_total` (a counter);
- prints `listening 127.0.0.1:LOAD_PORT 127.0.0.1:METRICS_PORT` on stdout;
- with EXPORTER_LIFETIME_S, the exporter stops answering after that many seconds (its
  socket closed: connections refused) while the load port keeps serving — a source that
  dies mid-run;
- with the environment variable POOL_COLD_S, a cold start: the service time begins 20 times
  SERVICE_MS at the first request and falls linearly to SERVICE_MS over that many seconds
  (a JIT or a cache warming up);
- with POOL_LEAK_KB, every request keeps that many KiB forever (a leak);
- with POOL_BURN_MS, every request also burns that many ms of CPU in its slot (CPU time of
  its thread, so a core shared with others stretches it: a CPU-bound endpoint);
- with POOL_SCRAPE_TAKES_SLOT=1, the exporter is served like php-fpm's status page: each
  scrape takes a worker slot (waiting its turn behind the queued requests when all are
  busy) and `pool_busy_workers` is the slots taken at that instant, its own included.
"""

import collections
import os
import socket
import sys
import threading
import time

WORKERS = int(sys.argv[1])
SERVICE_S = float(sys.argv[2]) / 1000.0
LIFETIME_S = float(sys.argv[3]) if len(sys.argv) > 3 else None
COLD_S = float(os.environ.get("POOL_COLD_S", "0"))
LEAK = int(os.environ.get("POOL_LEAK_KB", "0")) * 1024
BURN_S = float(os.environ.get("POOL_BURN_MS", "0")) / 1000.0
SCRAPE_TAKES_SLOT = os.environ.get("POOL_SCRAPE_TAKES_SLOT") == "1"
leaked = []
first_request = None

class Slots:
    """WORKERS slots taken first come, first served, as a server's accept queue serves its
    workers (php-fpm's listen backlog): a freed slot goes to the longest waiter. A plain
    Semaphore lets a newcomer take a slot ahead of those waiting — a scrape would then find
    a worker within milliseconds in a pool with sixty requests queued."""

    def __init__(self, n):
        self.free = n
        self.lock = threading.Lock()
        self.waiting = collections.deque()

    def __enter__(self):
        with self.lock:
            if self.free > 0 and not self.waiting:
                self.free -= 1
                return self
            turn = threading.Event()
            self.waiting.append(turn)
        turn.wait()
        return self

    def __exit__(self, *_):
        with self.lock:
            if self.waiting:
                self.waiting.popleft().set()  # the slot passes to it directly
            else:
                self.free += 1


slots = Slots(WORKERS)
lock = threading.Lock()
busy = 0
served = 0
recent = []  # (time, busy) samples of the last 200 ms


def sampler():
    while True:
        now = time.monotonic()
        with lock:
            recent.append((now, busy))
            while recent and recent[0][0] < now - 0.2:
                recent.pop(0)
        time.sleep(0.01)


def service_s():
    global first_request
    now = time.monotonic()
    if first_request is None:
        first_request = now
    if COLD_S <= 0:
        return SERVICE_S
    cold = max(0.0, 1.0 - (now - first_request) / COLD_S)
    return SERVICE_S * (1.0 + 19.0 * cold)


def serve_load(conn):
    global busy, served
    buf = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in buf:
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
            head, buf = buf.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(buf) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
            buf = buf[length:]
            with slots:
                with lock:
                    busy += 1
                time.sleep(service_s())
                if BURN_S > 0:
                    burn(BURN_S)
                if LEAK:
                    leaked.append(b"x" * LEAK)
                with lock:
                    busy -= 1
                    served += 1
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok")
            except OSError:
                return


def burn(seconds):
    """Spin until this thread has used `seconds` of CPU (bounded by 100 times that in wall time)."""
    start, wall = time.thread_time(), time.monotonic()
    while time.thread_time() - start < seconds and time.monotonic() - wall < 100 * seconds:
        pass


def exposition():
    global busy
    if SCRAPE_TAKES_SLOT:
        with slots:
            with lock:
                busy += 1
                level = busy
                total = served
                busy -= 1
    else:
        with lock:
            level = sum(b for _, b in recent) / len(recent) if recent else busy
            total = served
    return (
        "# HELP pool_busy_workers Worker slots taken (mean of the last 200 ms).\n"
        "# TYPE pool_busy_workers gauge\n"
        f"pool_busy_workers{{pool=\"main\"}} {level}\n"
        "# TYPE pool_max_workers gauge\n"
        f"pool_max_workers{{pool=\"main\"}} {WORKERS}\n"
        "# TYPE pool_requests_total counter\n"
        f"pool_requests_total{{pool=\"main\"}} {total}\n"
    ).encode()


def serve_metrics(listener):
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            try:
                conn.settimeout(2)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                body = exposition()
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nConnection: close\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
            except OSError:
                pass


def main():
    load = socket.socket()
    load.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    load.bind(("127.0.0.1", 0))
    load.listen(1024)
    metrics = socket.socket()
    metrics.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    metrics.bind(("127.0.0.1", 0))
    metrics.listen(64)
    print(f"listening 127.0.0.1:{load.getsockname()[1]} 127.0.0.1:{metrics.getsockname()[1]}", flush=True)
    threading.Thread(target=sampler, daemon=True).start()
    threading.Thread(target=serve_metrics, args=(metrics,), daemon=True).start()
    if LIFETIME_S is not None:
        def die():
            time.sleep(LIFETIME_S)
            metrics.shutdown(socket.SHUT_RDWR)
            metrics.close()
        threading.Thread(target=die, daemon=True).start()
    while True:
        conn, _ = load.accept()
        threading.Thread(target=serve_load, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
