"""tests/gpu/page_open.py without a GPU: its WebSocket handshake against RFC 6455's own example, and a
page held open on `gpudash --simulate` (GPUDASH_BIN, as tests/run.sh sets it) until the snapshot and ticks
arrive. tests/gpu/h200.sh measures memory with a page open through it; a wrong accept key made that step
fail on the GPU machine before it measured anything (session 23)."""
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import page_open  # noqa: E402


def test_the_accept_key_is_rfc_6455s():
    # RFC 6455, section 1.3: the sample nonce and the answer a server must give.
    assert page_open.accept_for("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not os.environ.get("GPUDASH_BIN"), reason="needs GPUDASH_BIN (a gpudash build)")
def test_a_page_stays_open_on_a_simulated_server():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([os.environ["GPUDASH_BIN"], "--simulate", "2", "--no-history", "--interval", "200ms",
                               "--listen", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/healthz", timeout=1).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "gpudash --simulate did not answer /healthz within 30 s"
                time.sleep(0.1)
        out = subprocess.run([sys.executable, str(Path(__file__).parent / "page_open.py"), url, "--seconds", "2"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "page open: " in out.stdout and "/ws live" in out.stdout, out.stdout
        assert "tick message(s)" in out.stdout and "1 snapshot" in out.stdout, out.stdout
    finally:
        server.terminate()
        server.wait(timeout=10)
