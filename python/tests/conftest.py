"""Fixtures: the stand-in torch on sys.path, and real gpudash servers (simulated GPUs)."""

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE / "fake_torch"))
sys.path.insert(0, str(HERE.parent))

REPO = HERE.parent.parent
BIN = os.environ.get("GPUDASH_BIN", str(REPO / "target" / "debug" / "gpudash"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, port=None, tokens=None):
        self.port = port or free_port()
        env = dict(os.environ, GPUDASH_LOG="warn")
        env.pop("GPUDASH_TOKENS", None)
        if tokens:
            env["GPUDASH_TOKENS"] = tokens
        if not os.path.exists(BIN):
            pytest.fail(f"gpudash binary not found at {BIN}: build it (cargo build -p gpudash) or set GPUDASH_BIN")
        self.proc = subprocess.Popen(
            [BIN, "--simulate", "1", "--no-history", "--interval", "200ms", "--listen", f"127.0.0.1:{self.port}"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=1)
                return
            except Exception:  # noqa: BLE001
                time.sleep(0.1)
        self.stop()
        pytest.fail("gpudash did not start")

    def get(self, path, token=None):
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {token}"} if token else {})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.load(response)

    def post(self, path, token=None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(self.url + path, data=b"", headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def fresh_state():
    import gpudash
    import torch

    torch.cuda.state.reset()
    yield
    gpudash.detach()


def wait_for(check, seconds=10, what="condition"):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def mine(server, token=None):
    """This test process's entry in /api/bridge, if any."""
    return next((p for p in server.get("/api/bridge", token) if p["pid"] == os.getpid()), None)


__all__ = ["Server", "wait_for", "mine", "free_port", "re"]
