#!/usr/bin/env python3
"""A page open on a running gpudash, as a browser tab keeps it, without a browser (standard library only).

Usage: python3 tests/gpu/page_open.py URL [--seconds N]      e.g. http://127.0.0.1:7071

What the page does (frontend/index.html, frontend/boot.js, frontend/src/hooks/telemetry.rs, session.rs,
alerts.rs, lab.rs, reservations.rs, history.rs), in its order, over one kept-alive HTTP/1.1 connection:
  1. GET / and what the page loads before the app runs, found in the answers: the stylesheet and the
     module script the HTML names, the wasm the entry script instantiates (`new URL(…, import.meta.url)`),
     and every script's static imports (frontend.js imports split.js). Modules imported lazily
     (`import(…)`, fetched when a tab first needs them) are not. Accept-Encoding is a browser's
     ("gzip, deflate, br") when Python's brotli module is here to read the answers back, else
     "gzip, deflate": the server then sends its gzip twins instead of the brotli ones (same pages of
     the binary's data, somewhat larger); the output says which;
  2. GET /api/me (who the page is), then the live stream: GET /ws with the Upgrade handshake (RFC 6455,
     a random Sec-WebSocket-Key, the page's Origin, permessage-deflate offered as browsers do). The page
     sends nothing first: the server sends a snapshot, then every tick; the page sends {"type":"resync"}
     only after a gap, which a reader that keeps up never sees;
  3. once the snapshot is in: /api/alerts?state=firing&limit=1000, /api/alerts/subscriptions, /api/lab
     (and /api/runs?limit=20 when the lab is available), /api/fleet?gpus=none, /api/history/all (5 minutes,
     1000 points, when the server keeps history), /api/reservations (again every 5 s, as the Dashboard
     tab polls it);
  4. then reads and drops every frame (answering pings) for SECONDS (default 60), or until SIGTERM/SIGINT.
Prints "page open: …" once the snapshot is in (tests/gpu/h200.sh waits for that line), and at the end
what it received. Exits 1 when the page or the stream fails: an asset not 200, no upgrade, no snapshot
within 10 s, or the server closing the socket.
"""
import base64
import gzip
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import struct
import sys
import time
import urllib.parse
import zlib
from html.parser import HTMLParser

try:
    import brotli  # not in the standard library; used only when it is there
except ImportError:
    brotli = None

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3
STOP = []


class Links(HTMLParser):
    """The stylesheets and scripts an HTML page loads."""

    def __init__(self):
        super().__init__()
        self.found, self.entries = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "link" and attrs.get("href") and set((attrs.get("rel") or "").split()) & {
                "stylesheet", "modulepreload", "preload", "icon"}:
            self.found.append(attrs["href"])
        elif tag == "script" and attrs.get("src"):
            self.found.append(attrs["src"])
            self.entries.append(attrs["src"])


IMPORT = re.compile(r"""(?:^|[;\s}])(?:import|export)\s*(?:[\w*{}\s,$]+\s*from\s*)?["']([^"']+)["']""")
NEW_URL = re.compile(r"""new\s+URL\(\s*["']([^"']+)["']\s*,\s*import\.meta\.url""")


class Page:
    def __init__(self, base):
        self.base = base
        self.parts = urllib.parse.urlsplit(base)
        self.http = None
        self.requests = []  # (path, status, encoding, bytes)
        self.encodings = "gzip, deflate, br" if brotli else "gzip, deflate"

    def get(self, path):
        """(status, decoded body or None, content type), on the kept-alive connection (reopened once if closed)."""
        headers = {"Accept-Encoding": self.encodings, "Accept": "*/*", "User-Agent": "gpudash tests/gpu/page_open.py",
                   "Referer": self.base + "/"}
        for attempt in (0, 1):
            if self.http is None:
                self.http = http.client.HTTPConnection(self.parts.hostname, self.parts.port or 80, timeout=10)
            try:
                self.http.request("GET", path, headers=headers)
                response = self.http.getresponse()
                raw = response.read()
                break
            except (http.client.HTTPException, OSError):
                self.http.close()
                self.http = None
                if attempt:
                    raise
        encoding = response.getheader("Content-Encoding", "") or ""
        self.requests.append((path, response.status, encoding, len(raw)))
        body = raw
        if encoding == "gzip":
            body = gzip.decompress(raw)
        elif encoding == "deflate":
            body = zlib.decompress(raw)
        elif encoding == "br":
            body = brotli.decompress(raw) if brotli else None
        return response.status, body, response.getheader("Content-Type", "") or ""

    def load(self):
        """The page and what it loads before the app runs; returns the failures."""
        failures, queue, done = [], [("/", False)], set()
        while queue:
            path, entry = queue.pop(0)
            if path in done:
                continue
            done.add(path)
            status, body, kind = self.get(path)
            if status != 200:
                failures.append(f"GET {path}: {status}")
                continue
            found = []
            if body is not None and "html" in kind:
                links = Links()
                links.feed(body.decode(errors="replace"))
                found = [(link, link in links.entries) for link in links.found]
            elif body is not None and "javascript" in kind:
                text = body.decode(errors="replace")
                found = [(link, False) for link in IMPORT.findall(text)]
                if entry:
                    found += [(link, False) for link in NEW_URL.findall(text)]
            for link, is_entry in found:
                url = urllib.parse.urlsplit(urllib.parse.urljoin(self.base + path, link))
                if url.netloc in ("", self.parts.netloc):
                    queue.append((url.path, is_entry))
        # A browser asks for the icon the page does not name.
        self.get("/favicon.ico")
        return failures


def accept_for(key):
    """The Sec-WebSocket-Accept a server must answer to `key` (RFC 6455, section 4.2.2)."""
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


class Socket:
    """The client's side of one WebSocket: frames in, masked frames out."""

    def __init__(self, page):
        host, port = page.parts.hostname, page.parts.port or 80
        self.sock = socket.create_connection((host, port), timeout=10)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((
            f"GET /ws HTTP/1.1\r\nHost: {page.parts.netloc}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            f"Origin: {page.parts.scheme}://{page.parts.netloc}\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
            "User-Agent: gpudash tests/gpu/page_open.py\r\nCache-Control: no-cache\r\n\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError(f"/ws: the server closed the connection during the handshake: {self.buf[:300]!r}")
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode(errors="replace").split("\r\n")
        if " 101 " not in lines[0] + " ":
            raise ConnectionError(f"/ws: no upgrade: {lines[0]} {self.buf[:300]!r}")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        accept = accept_for(key)
        if headers.get("sec-websocket-accept") != accept:
            raise ConnectionError(f"/ws: Sec-WebSocket-Accept {headers.get('sec-websocket-accept')!r}, not {accept!r}")
        extensions = headers.get("sec-websocket-extensions", "")
        self.deflate = "permessage-deflate" in extensions
        self.reset_each = "server_no_context_takeover" in extensions
        self.inflater = zlib.decompressobj(-15)
        self.partial, self.compressed = [], False
        self.bytes = 0

    def send(self, opcode, payload=b""):
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | opcode]) + (bytes([0x80 | n]) if n < 126 else
                                         bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                         bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def frames(self):
        """Complete frames in the buffer: (fin, rsv1, opcode, payload)."""
        while len(self.buf) >= 2:
            b0, b1 = self.buf[0], self.buf[1]
            n, at = b1 & 0x7F, 2
            if n == 126:
                if len(self.buf) < 4:
                    return
                n, at = struct.unpack(">H", self.buf[2:4])[0], 4
            elif n == 127:
                if len(self.buf) < 10:
                    return
                n, at = struct.unpack(">Q", self.buf[2:10])[0], 10
            mask = b""
            if b1 & 0x80:  # a server must not mask; read it anyway
                mask, at = self.buf[at:at + 4], at + 4
            if len(self.buf) < at + n:
                return
            payload, self.buf = self.buf[at:at + n], self.buf[at + n:]
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            yield bool(b0 & 0x80), bool(b0 & 0x40), b0 & 0x0F, payload

    def messages(self, timeout):
        """Text or binary messages received within `timeout` s; control frames are answered here."""
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(1 << 16)
        except socket.timeout:
            return []
        if not chunk:
            raise ConnectionError("/ws: the server closed the connection")
        self.bytes += len(chunk)
        self.buf += chunk
        out = []
        for fin, rsv1, opcode, payload in self.frames():
            if opcode == 0x9:
                self.send(0xA, payload)
            elif opcode == 0x8:
                code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
                raise ConnectionError(f"/ws: the server closed the socket (code {code}: "
                                      f"{payload[2:].decode(errors='replace')})")
            elif opcode in (0x1, 0x2, 0x0):
                if opcode:
                    self.partial, self.compressed = [], rsv1
                self.partial.append(payload)
                if fin:
                    data = b"".join(self.partial)
                    if self.compressed and self.deflate:
                        if self.reset_each:
                            self.inflater = zlib.decompressobj(-15)
                        data = self.inflater.decompress(data + b"\x00\x00\xff\xff")
                    out.append(data)
        return out


def kind(message):
    """The message's "type" tag (the server writes it first)."""
    found = re.match(rb'\s*\{\s*"type"\s*:\s*"([a-z_]+)"', message[:64])
    return found.group(1).decode() if found else "?"


def main():
    args = sys.argv[1:]
    seconds = 60.0
    if "--seconds" in args:
        at = args.index("--seconds")
        seconds = float(args[at + 1])
        del args[at:at + 2]
    if len(args) != 1 or not args[0].startswith("http://"):
        print(__doc__)
        return 2
    base = args[0].rstrip("/")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: STOP.append(True))
    started = time.monotonic()
    page = Page(base)
    try:
        failures = page.load()
        if failures:
            print("page_open.py: FAIL, the page did not load: " + "; ".join(failures), flush=True)
            return 1
        page.get("/api/me")
        ws = Socket(page)
        first, deadline = [], time.monotonic() + 10
        while not first and time.monotonic() < deadline and not STOP:
            first = ws.messages(max(0.05, deadline - time.monotonic()))
    except (OSError, ConnectionError, http.client.HTTPException, zlib.error) as e:
        print(f"page_open.py: FAIL, {e}", flush=True)
        return 1
    if not first or kind(first[0]) != "snapshot":
        print(f"page_open.py: FAIL, no snapshot on /ws within 10 s (first: {first[0][:80] if first else None!r})",
              flush=True)
        return 1
    counts = {}
    for message in first:
        counts[kind(message)] = counts.get(kind(message), 0) + 1
    snapshot = json.loads(first[0])
    history = bool((snapshot.get("host") or {}).get("history"))
    assets = [(p, s, e, n) for p, s, e, n in page.requests if p.startswith("/assets/") or p == "/"]
    print(f"page open: {base}/ and {len(assets) - 1} assets ("
          + ", ".join(f"{p} {n} B{' ' + e if e else ''}" for p, s, e, n in assets)
          + f"; asked {page.encodings}{'' if brotli else ': no brotli module here, so the gzip twins'}), "
          f"/ws live (permessage-deflate {'on' if ws.deflate else 'off'}), snapshot "
          f"{len(first[0])} B, {len(snapshot.get('devices') or [])} GPU(s)", flush=True)
    try:
        for path in ("/api/alerts?state=firing&limit=1000", "/api/alerts/subscriptions", "/api/fleet?gpus=none"):
            page.get(path)
        status, body, _ = page.get("/api/lab")
        if status == 200 and body and json.loads(body).get("available"):
            page.get("/api/runs?limit=20")
        if history:
            page.get(f"/api/history/all?range=5m&to={int(time.time() * 1000)}&points=1000")
        polled = time.monotonic() - 5
        end = started + seconds
        while not STOP and time.monotonic() < end:
            if time.monotonic() - polled >= 5:
                page.get("/api/reservations")
                polled = time.monotonic()
            for message in ws.messages(min(0.5, max(0.01, end - time.monotonic()))):
                counts[kind(message)] = counts.get(kind(message), 0) + 1
    except (OSError, ConnectionError, http.client.HTTPException, zlib.error, ValueError) as e:
        print(f"page_open.py: FAIL after {time.monotonic() - started:.1f} s: {e}", flush=True)
        return 1
    try:
        ws.send(0x8, struct.pack(">H", 1001))  # "going away", as a closing tab
        ws.sock.close()
    except OSError:
        pass
    others = [f"{p} {s}" for p, s, _, _ in page.requests if not (p.startswith("/assets/") or p == "/")]
    print(f"page closed after {time.monotonic() - started:.1f} s: "
          + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + f" message(s), {ws.bytes / 1024:.1f} KiB "
          f"on /ws; {len(page.requests)} HTTP requests ({', '.join(others)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
