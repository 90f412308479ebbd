#!/usr/bin/env python3
"""A hostile HTTP/1.1 server for loader's end-to-end tests (tests/hostile.rs).

Stdlib only (Python 3.11). Listens on 127.0.0.1 port 0, prints one line
`listening 127.0.0.1:PORT` on stdout, then serves keep-alive connections. Every request
on a connection is parsed properly (request line, headers, Content-Length body), and its
path picks the misbehaviour, so one server serves every mode:

  /ok               200 with Content-Length (the control case)
  /reset            RST (SO_LINGER 0, then close) before any response byte
  /reset-mid        RST after half of a Content-Length body
  /half             clean close (FIN) after half of a Content-Length body
  /half-head        clean close in the middle of the status/header section
  /close            clean close before any response byte
  /silent           reads the request, never answers, keeps the connection open
  /garbage          random non-HTTP bytes, connection left open
  /bad-status       cycles `HTTP/1.1 2OO OK`, `HTTP/9.9 200 OK`, `HTTP/1.1\r\n`, `HTTP/1.1 20 OK`
  /dup-cl           two conflicting Content-Length headers
  /neg-cl           Content-Length: -5
  /huge-cl          Content-Length larger than 2^64
  /cl-te            both Content-Length and Transfer-Encoding: chunked (smuggling shape)
  /many-headers     5000 header lines
  /huge-header      one 1 MiB header line, written in one go
  /big-body         a 64 MiB body with Content-Length (one preallocated buffer)
  /slow-body        Content-Length 100, body trickled 1 byte / 100 ms
  /slow-head        the status line and headers trickled 1 byte / 100 ms
  /close-delimited  200 without Content-Length or chunked, body ended by close
  /http10           HTTP/1.0 200 without Content-Length, ended by close
  /lf-only          a valid response whose lines end in bare LF
  /1xx              100 Continue and 103 Early Hints before the 200
  /endless-1xx      interim 100 Continue responses forever (one per 100 ms), never a final one
  /switching        101 Switching Protocols nobody asked for
  /trailers         chunked with chunk extensions and trailer fields
  /bad-chunk        cycles an invalid chunk size, chunk data without CRLF, a negative size,
                    a size past 2^64
  /desync           a full response plus a second, unsolicited one (alternately at once and
                    20 ms later) on the same keep-alive connection
  /status-mix       cycles 200, 204, 301, 404, 429, 500, 503, 600, 999 (one server-wide counter)
  /idle-close       200 with Content-Length, then closes the connection (no Connection: close)
  /close-on-reuse   answers the first request on a connection; a later one on the same
                    connection is read and met with a clean close (the keep-alive race, made
                    certain)
  /rst-on-reuse     the same, with RST instead of FIN
  /dribble          a chunked response with extensions and trailers, written 3 bytes at a time
  /__stats          JSON: requests per path, statuses sent by /status-mix, connections

Unknown paths get 404. The server never exits by itself; the test kills it.
"""

import asyncio
import json
import os
import socket
import struct
import sys

# Preallocated payloads: the server must stay cheap next to the loader on a 2-core box.
BIG_BODY = memoryview(bytes(64 * 1024 * 1024))
BIG_HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BIG_BODY)
HUGE_HEADER = (
    b"HTTP/1.1 200 OK\r\nX-Huge: " + b"a" * (1024 * 1024) + b"\r\nContent-Length: 2\r\n\r\nok"
)
MANY_HEADERS = (
    b"HTTP/1.1 200 OK\r\n"
    + b"".join(b"X-Header-%d: value\r\n" % i for i in range(5000))
    + b"Content-Length: 2\r\n\r\nok"
)
STATUS_MIX = [200, 204, 301, 404, 429, 500, 503, 600, 999]
BAD_STATUS = [
    b"HTTP/1.1 2OO OK\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/9.9 200 OK\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\nok",
]
BAD_CHUNK = [
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
TRAILERS = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum, X-Other\r\n\r\n"
    b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n"
)

MAX_REQUEST_HEAD = 64 * 1024
TRICKLE_S = 0.1

stats = {"connections": 0, "requests": {}, "statuses": {}}
counters = {"bad-status": 0, "bad-chunk": 0, "desync": 0, "status-mix": 0}


def next_of(name, items):
    i = counters[name]
    counters[name] = i + 1
    return items[i % len(items)]


class Close(Exception):
    """End this connection (the response already did what it had to)."""


def rst(writer):
    """Abort with SO_LINGER 0, so the kernel sends RST instead of FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def send(writer, data):
    writer.write(data)
    await writer.drain()


async def trickle(writer, data):
    """One byte per TRICKLE_S; stops as soon as the peer has gone."""
    for i in range(len(data)):
        if writer.is_closing():
            raise Close()
        await send(writer, data[i : i + 1])
        await asyncio.sleep(TRICKLE_S)


async def read_request(reader):
    """Read one request (head and Content-Length body); its path, or None at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return None
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if length:
        await reader.readexactly(length)
    return parts[1].split("?")[0]


async def respond(path, served, reader, writer):
    """Answer one request (`served` earlier ones on this connection); raise Close to end
    the connection afterwards."""
    mode = path.lstrip("/")
    if mode == "ok":
        await send(writer, OK)
    elif mode == "reset":
        rst(writer)
        raise Close()
    elif mode == "reset-mid":
        await send(writer, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 50)
        await asyncio.sleep(0.02)
        rst(writer)
        raise Close()
    elif mode == "half":
        await send(writer, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 50)
        raise Close()
    elif mode == "half-head":
        await send(writer, b"HTTP/1.1 200 OK\r\nContent-Le")
        raise Close()
    elif mode == "close":
        raise Close()
    elif mode == "silent":
        # Keep the connection; the client gives up on its own (or the connection ends).
        await reader.read()
        raise Close()
    elif mode == "garbage":
        await send(writer, b"\x00\xff" + os.urandom(510))
    elif mode == "bad-status":
        await send(writer, next_of("bad-status", BAD_STATUS))
    elif mode == "dup-cl":
        await send(writer, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok")
    elif mode == "neg-cl":
        await send(writer, b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nok")
    elif mode == "huge-cl":
        await send(writer, b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\nok")
    elif mode == "cl-te":
        await send(
            writer,
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        )
    elif mode == "many-headers":
        await send(writer, MANY_HEADERS)
    elif mode == "huge-header":
        await send(writer, HUGE_HEADER)
    elif mode == "big-body":
        writer.write(BIG_HEAD)
        # In 1 MiB slices, so asyncio never copies more than a slice into its own buffer.
        for at in range(0, len(BIG_BODY), 1 << 20):
            if writer.is_closing():
                raise Close()
            writer.write(BIG_BODY[at : at + (1 << 20)])
            await writer.drain()
    elif mode == "slow-body":
        await send(writer, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        await trickle(writer, b"x" * 100)
    elif mode == "slow-head":
        await trickle(writer, OK)
    elif mode == "close-delimited":
        await send(writer, b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nbody ended by close")
        raise Close()
    elif mode == "http10":
        await send(writer, b"HTTP/1.0 200 OK\r\n\r\nbody ended by close")
        raise Close()
    elif mode == "lf-only":
        await send(writer, b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok")
    elif mode == "1xx":
        # Separate writes (and segments), so interim and final heads arrive apart too.
        await send(writer, b"HTTP/1.1 100 Continue\r\n\r\n")
        await asyncio.sleep(0.002)
        await send(writer, b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
        await send(writer, b"HTTP/1.1 100 Continue\r\n\r\n" + OK)
    elif mode == "endless-1xx":
        for _ in range(600):
            if writer.is_closing():
                raise Close()
            await send(writer, b"HTTP/1.1 100 Continue\r\n\r\n")
            await asyncio.sleep(TRICKLE_S)
        raise Close()
    elif mode == "switching":
        await send(writer, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
    elif mode == "trailers":
        await send(writer, TRAILERS)
    elif mode == "dribble":
        for at in range(0, len(TRAILERS), 3):
            await send(writer, TRAILERS[at : at + 3])
            await asyncio.sleep(0.001)
    elif mode == "bad-chunk":
        await send(writer, next_of("bad-chunk", BAD_CHUNK))
    elif mode == "desync":
        extra = b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nsmuggle"
        if next_of("desync", [True, False]):
            await send(writer, OK + extra)
        else:
            await send(writer, OK)
            await asyncio.sleep(0.02)
            await send(writer, extra)
    elif mode == "status-mix":
        status = next_of("status-mix", STATUS_MIX)
        key = str(status)
        stats["statuses"][key] = stats["statuses"].get(key, 0) + 1
        if status == 204:
            await send(writer, b"HTTP/1.1 204 No Content\r\n\r\n")
        elif status == 301:
            await send(writer, b"HTTP/1.1 301 Moved\r\nLocation: /ok\r\nContent-Length: 2\r\n\r\nok")
        else:
            await send(writer, b"HTTP/1.1 %d Whatever\r\nContent-Length: 2\r\n\r\nok" % status)
    elif mode == "idle-close":
        await send(writer, OK)
        raise Close()
    elif mode in ("close-on-reuse", "rst-on-reuse"):
        if served == 0:
            await send(writer, OK)
        elif mode == "rst-on-reuse":
            rst(writer)
            raise Close()
        else:
            raise Close()
    elif mode == "__stats":
        body = json.dumps(stats).encode()
        await send(writer, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        raise Close()
    else:
        await send(writer, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")


async def serve(reader, writer):
    stats["connections"] += 1
    served = 0
    try:
        while True:
            path = await read_request(reader)
            if path is None:
                break
            stats["requests"][path] = stats["requests"].get(path, 0) + 1
            await respond(path, served, reader, writer)
            served += 1
    except (Close, ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        if not writer.is_closing():
            writer.close()
        try:
            await writer.wait_closed()
        except (ConnectionError, OSError):
            pass


async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0, limit=MAX_REQUEST_HEAD, backlog=1024)
    host, port = server.sockets[0].getsockname()[:2]
    print(f"listening {host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
