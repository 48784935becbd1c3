#!/usr/bin/env python3
"""Measures gpudash's CPU and memory from /proc while it serves, for the Kubernetes requests and limits.

Starts `gpudash --listen 127.0.0.1:PORT --data-dir TMP` (history on, as deployed) plus the given
arguments, scrapes /metrics every 15 s like Prometheus, keeps VIEWERS WebSocket viewers connected
(a raw RFC 6455 handshake; frames are read and dropped), and every second reads utime+stime from
/proc/PID/stat and VmRSS from /proc/PID/status. Prints the mean and the busiest 10 s of CPU in
millicores, and the RSS at the end and its peak (VmHWM), in MiB.

usage: measure-resources.py BINARY SECONDS VIEWERS -- GPUDASH_ARGS...
"""

import base64
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def viewer(port, stop):
    """One WebSocket viewer: handshake, then read every frame until told to stop."""
    key = base64.b64encode(os.urandom(16)).decode()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(
            (
                f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = s.recv(4096)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise SystemExit(f"viewer: no upgrade: {head[:200]!r}")
        s.settimeout(1.0)
        while not stop.is_set():
            try:
                if not s.recv(1 << 16):
                    raise SystemExit("viewer: the server closed the socket")
            except TimeoutError:
                pass


def main():
    if "--" not in sys.argv:
        raise SystemExit(__doc__)
    split = sys.argv.index("--")
    binary, seconds, viewers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    extra = sys.argv[split + 1 :]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tempfile.mkdtemp(prefix="gpudash-measure-")
    proc = subprocess.Popen(
        [binary, "--listen", f"127.0.0.1:{port}", "--data-dir", data, *extra],
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(data, "log"), "w"),
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"gpudash did not answer: {open(os.path.join(data, 'log')).read()[-2000:]}")
                time.sleep(0.2)
        stop = threading.Event()
        threads = [threading.Thread(target=viewer, args=(port, stop), daemon=True) for _ in range(viewers)]
        for t in threads:
            t.start()
        time.sleep(3)  # let start-up (and the viewers' snapshots) pass: steady state is measured
        samples = []  # (monotonic seconds, cpu ticks)
        start = time.monotonic()
        next_scrape = start
        while time.monotonic() - start < seconds:
            now = time.monotonic()
            if now >= next_scrape:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
                next_scrape += 15
            samples.append((now, cpu_ticks(proc.pid)))
            time.sleep(1)
        samples.append((time.monotonic(), cpu_ticks(proc.pid)))
        rss = status_kib(proc.pid, "VmRSS") / 1024
        hwm = status_kib(proc.pid, "VmHWM") / 1024
        stop.set()
        (t0, c0), (t1, c1) = samples[0], samples[-1]
        mean = (c1 - c0) / TICKS / (t1 - t0) * 1000
        busiest = None
        for i in range(len(samples)):
            for j in range(i + 1, len(samples)):
                if samples[j][0] - samples[i][0] >= 10:
                    rate = (samples[j][1] - samples[i][1]) / TICKS / (samples[j][0] - samples[i][0]) * 1000
                    busiest = rate if busiest is None else max(busiest, rate)
                    break
        print(
            f"gpudash {' '.join(extra)}, {viewers} WebSocket viewers, /metrics every 15 s, {t1 - t0:.0f} s: "
            f"CPU mean {mean:.1f} millicores, busiest 10 s "
            f"{'n/a' if busiest is None else f'{busiest:.1f}'} millicores; "
            f"RSS {rss:.1f} MiB at the end, peak {hwm:.1f} MiB"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
