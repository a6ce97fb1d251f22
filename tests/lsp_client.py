"""A minimal LSP client for `commdsl lsp`: JSON-RPC over the server's stdin and stdout, as an editor speaks it
(tests/test_lsp.py, benchmarks/lsp_latency.py)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path


class Client:
    """JSON-RPC over stdio with LSP's Content-Length framing; messages read on a thread into a queue."""

    def __init__(self, cwd: Path, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "commdsl", "lsp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                                     env=dict(os.environ, **(env or {})))
        self.inbox: queue.Queue = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            self.inbox.put(json.loads(out.read(length)))

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method: str, params: dict) -> None:
        self.send({"method": method, "params": params})

    def request(self, method: str, params: dict, timeout: float = 30):
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        return self.wait(lambda m: m.get("id") == self.next_id and "method" not in m, timeout)["result"]

    def wait(self, match, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            message = self.inbox.get(timeout=max(deadline - time.monotonic(), 0.01))
            if match(message):
                return message

    def diagnostics(self, uri: str, version: int | None = None, timeout: float = 30) -> list[dict]:
        return self.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                         and m["params"]["uri"] == uri and (version is None or m["params"].get("version") == version),
                         timeout)["params"]["diagnostics"]

    def close(self) -> int:
        try:
            self.request("shutdown", {}, timeout=10)
            self.notify("exit", {})
            try:
                return self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise AssertionError("the server did not exit: " + self.proc.stderr.read().decode()[-3000:]) from None
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
