"""Slow request bodies from 127.0.0.1, run as another local user (`setpriv --reuid nobody`):
SOCKETS sockets each announce a 60,000-byte login body and send one byte every 500 ms,
reconnecting (at most once a second each) when the server closes them, for SECONDS.
Prints the connections opened. Used by tests/integration/floods.rs.

usage: python3 trickle.py PORT SOCKETS SECONDS
"""

import socket
import sys
import time

HEAD = (
    b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b'Content-Length: 60000\r\n\r\n{"token":"'
)


def connect(port):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=1)
        s.sendall(HEAD)
        s.setblocking(False)
        return s
    except OSError:
        return None


def alive(s):
    """Sends one more byte; False once the server has closed the socket."""
    try:
        if s.recv(512) == b"":
            return False
    except BlockingIOError:
        pass
    except OSError:
        return False
    try:
        s.send(b"a")
        return True
    except OSError:
        return False


def main():
    port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    end = time.monotonic() + seconds
    sockets = [None] * count
    retry_at = [0.0] * count
    opened = 0
    while time.monotonic() < end:
        now = time.monotonic()
        for i, s in enumerate(sockets):
            if s is not None and alive(s):
                continue
            if s is not None:
                s.close()
                sockets[i] = None
            if now >= retry_at[i]:
                retry_at[i] = now + 1
                sockets[i] = connect(port)
                opened += sockets[i] is not None
        time.sleep(0.5)
    print(opened, flush=True)


if __name__ == "__main__":
    main()
