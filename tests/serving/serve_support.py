"""Starting `infer serve` and talking to it, for the serving tests."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77


def compile_artifact(infer, model_dir, out_dir):
    """An artifact of model_dir (compiled once per test run)."""
    if not os.path.exists(os.path.join(out_dir, "manifest.json")):
        subprocess.run([infer, "compile", model_dir, "-o", out_dir], check=True,
                       stdout=subprocess.DEVNULL)
    return out_dir


class Server:
    """`infer serve MODEL --port 0 ARGS...`, stopped on exit."""

    def __init__(self, infer, model, *args, env=None):
        self.stderr = tempfile.TemporaryFile()
        cmd = [infer, "serve", model, "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                     stderr=self.stderr, env=env)
        deadline = time.time() + 120
        self.port = None
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(rb"listening on http://[^:]+:(\d+)", self.log_bytes())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.1)
        if self.port is None:
            raise RuntimeError("infer serve did not start:\n" + self.log())

    def log_bytes(self):
        self.stderr.seek(0)
        return self.stderr.read()

    def log(self):
        return self.log_bytes().decode(errors="replace")

    def request(self, method, path, body=None, headers=None, raw=None):
        """(status, headers dict, parsed JSON or text)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        data = raw if raw is not None else (
            json.dumps(body) if body is not None else None)
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        try:
            payload = json.loads(text)
        except ValueError:
            payload = text
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, payload

    def open_stream(self, path, body, headers=None):
        """A socket with the request sent; read events with read_events."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=120)
        data = json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n")
        for k, v in (headers or {}).items():
            head += f"{k}: {v}\r\n"
        s.sendall(head.encode() + b"\r\n" + data)
        return SseReader(s)

    def metrics(self):
        status, _, text = self.request("GET", "/metrics")
        assert status == 200, status
        values = {}
        for line in text.splitlines():
            if line.startswith("#") or not line:
                continue
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
        return values

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class SseReader:
    """Reads a chunked text/event-stream response from a raw socket."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.status = None
        self.headers = {}
        self.body = b""
        self.done = False

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed")
        self.buf += chunk

    def read_head(self):
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        for line in lines[1:]:
            k, v = line.split(":", 1)
            self.headers[k.strip().lower()] = v.strip()
        return self.status

    def _next_chunk(self):
        while b"\r\n" not in self.buf:
            self._fill()
        size_line, rest = self.buf.split(b"\r\n", 1)
        size = int(size_line, 16)
        while len(rest) < size + 2:
            self._fill()
            rest = self.buf.split(b"\r\n", 1)[1]
        self.buf = rest[size + 2:]
        return rest[:size]

    def events(self):
        """Yields each `data:` payload (str) until [DONE] or the end."""
        if self.status is None:
            self.read_head()
        pending = b""
        while True:
            chunk = self._next_chunk()
            if not chunk:
                self.done = True
                return
            pending += chunk
            while b"\n\n" in pending:
                event, pending = pending.split(b"\n\n", 1)
                for line in event.decode().split("\n"):
                    if line.startswith("data: "):
                        yield line[6:]

    def close(self):
        self.sock.close()


def check(cond, message):
    if not cond:
        raise AssertionError(message)


def run_tests(tests):
    failed = 0
    for test in tests:
        start = time.time()
        try:
            test()
            print(f"[ OK ] {test.__name__} ({time.time() - start:.1f} s)", flush=True)
        except Exception as e:  # report every failing test
            failed += 1
            import traceback
            traceback.print_exc()
            print(f"[FAIL] {test.__name__}: {e}", flush=True)
    sys.exit(1 if failed else 0)
