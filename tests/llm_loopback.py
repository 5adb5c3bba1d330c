"""A loopback OpenAI-compatible chat-completions server for tests and benchmarks (stdlib only).

``LoopbackLLM`` serves ``POST /v1/chat/completions`` on 127.0.0.1 with

* a configurable latency (``latency`` ± ``jitter`` seconds, uniform; drawn per request from a hash
  of the request, so a rerun sees the same latencies);
* a concurrency cap (``max_concurrency``: requests beyond it queue, as in vLLM);
* fault injection: a fraction ``error_rate`` of requests answered 429 (with ``Retry-After`` when
  ``retry_after`` is set) or 503, alternately, from a seeded generator; or every request with
  ``status`` (or the requests ``status_of(body)`` gives a status); or a reply body of ``huge_reply``
  bytes; or replies that echo the request's ``Authorization`` header inside a 200 body that is not
  valid JSON (``echo_authorization``);
* structured outputs: ``response_format`` json_schema / json_object accepted, or rejected with
  HTTP 400 naming ``response_format`` (``json_schema=False``);
* deterministic answers (:func:`smart_reply`): SocialLLM post/interaction rules read from the
  prompt, EconAgent decisions and reflections derived from the request seed, and for any other
  schema a minimal valid object built from the JSON schema;
* counters: requests, answered, injected errors, tokens (what it reports in ``usage``), the most
  requests in flight, and requests/tokens per time window (``window`` seconds), all under
  ``stats()`` (also served as JSON on ``GET /stats``).

Run it as a separate process (benchmarks, so its CPU is not the client's)::

    python -m tests.llm_loopback --port 8765 --latency 0.2 --jitter 0.05 --max-concurrency 64 --error-rate 0.01
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_NUM = r"(-?\d+(?:\.\d+)?)"


def _h(*parts: Any) -> float:
    """A uniform number in [0, 1) from a hash of ``parts``."""
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:12], 16) / 16**12


def _num(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def from_schema(schema: dict, node: Any = None, seed: float = 0.5) -> Any:
    """A minimal object valid for a (pydantic-generated) JSON schema."""
    node = schema if node is None else node
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return from_schema(schema, schema.get("$defs", {})[name], seed)
    if "anyOf" in node:
        opts = [o for o in node["anyOf"] if o.get("type") != "null"] or node["anyOf"]
        return from_schema(schema, opts[0], seed)
    t = node.get("type")
    if t == "object":
        return {k: from_schema(schema, v, seed) for k, v in node.get("properties", {}).items()}
    if t == "array":
        return [from_schema(schema, node.get("items", {}), seed) for _ in range(max(1, node.get("minItems", 1)))]
    if t in ("number", "integer"):
        lo = node.get("minimum", node.get("exclusiveMinimum", 0.0))
        hi = node.get("maximum", node.get("exclusiveMaximum", lo + 1.0))
        v = lo + (hi - lo) * (0.25 + 0.5 * seed)
        return round(v) if t == "integer" else round(v, 2)
    if t == "boolean":
        return seed >= 0.5
    if t == "string":
        return "ok"
    return None


def _schema_of(body: dict) -> dict | None:
    rf = body.get("response_format") or {}
    if rf.get("type") == "json_schema":
        return rf.get("json_schema", {}).get("schema")
    for m in body.get("messages", []):
        c = m.get("content", "")
        i = c.find("JSON schema: ")
        if m.get("role") == "system" and i >= 0:
            try:
                return json.loads(c[i + len("JSON schema: "):])
            except ValueError:
                return None
    return None


def smart_reply(body: dict) -> str:
    """The server's deterministic answer to a chat-completions request (see the module docstring)."""
    msgs = body.get("messages", [])
    user = next((m["content"] for m in reversed(msgs) if m.get("role") == "user"), "")
    seed = body.get("seed", 0)
    u = _h(seed, user)
    if "post preference is" in user:
        pref = _num(r"post preference is " + _NUM, user) or 0.0
        return json.dumps({"post": pref + 0.2 * (u - 0.5) >= 0.55})
    if "interaction preference is" in user:
        pref = _num(r"interaction preference is " + _NUM, user) or 0.0
        if pref + 0.2 * (u - 0.5) < 0.45:
            return json.dumps({"interact": False, "action": None})
        b = _num(r"Your current belief is " + _NUM, user) or 0.0
        pb = _num(r"expressing the belief " + _NUM, user) or 0.0
        return json.dumps({"interact": True, "action": "like" if abs(b - pb) < 0.3 else "dislike"})
    if user.startswith("Given the previous quarter"):
        return json.dumps({"text": f"Quarter noted ({u:.3f}): prices matter; I keep a cushion."})
    if "'work'" in user and "'consumption'" in user:
        grid = lambda x: round(round(x / 0.02) * 0.02, 2)  # noqa: E731
        return json.dumps({"work": grid(0.6 + 0.4 * u), "consumption": grid(0.1 + 0.4 * _h(u, 1)),
                           "investment": grid(0.1 + 0.4 * _h(u, 2))})
    schema = _schema_of(body)
    return json.dumps(from_schema(schema, seed=u) if schema else {})


class LoopbackLLM:
    """See the module docstring. Use as a context manager; ``base_url`` is ``http://127.0.0.1:PORT/v1``."""

    def __init__(self, reply: Callable[[dict], str] | None = None, *, latency: float = 0.0, jitter: float = 0.0,
                 max_concurrency: int | None = None, error_rate: float = 0.0, error_seed: int = 0,
                 retry_after: float | None = None, status: int | None = None, json_schema: bool = True,
                 json_object: bool = True, echo_authorization: bool = False, huge_reply: int = 0,
                 window: float = 1.0, port: int = 0, record_bodies: bool = False,
                 status_of: Callable[[dict], int | None] | None = None) -> None:
        self.reply = reply or smart_reply
        self.status_of = status_of  # a status for this request body (e.g. 500 to one prompt), None: answer
        self.latency, self.jitter = float(latency), float(jitter)
        self.error_rate, self.retry_after, self.status = float(error_rate), retry_after, status
        self.json_schema, self.json_object = json_schema, json_object
        self.echo_authorization, self.huge_reply = echo_authorization, int(huge_reply)
        self.window = float(window)
        self.record_bodies = record_bodies
        self._rand = random.Random(error_seed)
        self._cap = threading.BoundedSemaphore(max_concurrency) if max_concurrency else None
        self._lock = threading.Lock()
        self.reset()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/stats"):
                    self._send(200, json.dumps(outer.stats()).encode())
                elif self.path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [{"id": "loopback", "object": "model"}]})
                               .encode())
                else:
                    self._send(404, b'{"error": {"message": "not found"}}')

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, data, headers = outer._handle(raw, self.headers.get("Authorization"))
                self._send(status, data, headers)

        ThreadingHTTPServer.request_queue_size = 1024
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # ------------------------------------------------------------------ counters
    def reset(self) -> None:
        with self._lock:
            self.requests = self.answered = self.injected = self.rejected = 0
            self.prompt_tokens = self.completion_tokens = 0
            self.in_flight = self.max_in_flight = 0
            self.per_window: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # window -> [requests, tokens]
            self.bodies: list[dict] = []
            self.formats: dict[str, int] = defaultdict(int)
            self.t0 = time.monotonic()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"requests": self.requests, "answered": self.answered, "injected_errors": self.injected,
                    "rejected": self.rejected, "prompt_tokens": self.prompt_tokens,
                    "completion_tokens": self.completion_tokens, "max_in_flight": self.max_in_flight,
                    "formats": dict(self.formats),
                    "per_window": {str(k): v for k, v in sorted(self.per_window.items())}, "window": self.window}

    # ------------------------------------------------------------------ serving
    def _handle(self, raw: bytes, auth: str | None) -> tuple[int, bytes, dict[str, str]]:
        now = time.monotonic()
        body = json.loads(raw or b"{}")
        fmt = (body.get("response_format") or {}).get("type", "none")
        with self._lock:
            self.requests += 1
            w = int((now - self.t0) // self.window)
            self.per_window[w][0] += 1
            self.formats[fmt] += 1
            if self.record_bodies:
                self.bodies.append(body)
            inject = self.error_rate > 0 and self._rand.random() < self.error_rate
            if inject:
                self.injected += 1
            kind = self.injected % 2
        if (fmt == "json_schema" and not self.json_schema) or (fmt == "json_object" and not self.json_object):
            with self._lock:
                self.rejected += 1
            msg = f"response_format of type '{fmt}' is not supported by this server"
            return 400, json.dumps({"error": {"message": msg, "param": "response_format"}}).encode(), {}
        status = self.status if self.status is not None else (self.status_of(body) if self.status_of else None)
        if status is not None:
            return status, json.dumps({"error": {"message": f"forced status {status}"}}).encode(), {}
        if self._cap is not None:
            self._cap.acquire()
        try:
            with self._lock:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self.latency or self.jitter:
                d = self.latency + self.jitter * (2 * _h(raw) - 1)
                time.sleep(max(0.0, d))
            if inject:
                if kind:
                    hdr = {"Retry-After": f"{self.retry_after:g}"} if self.retry_after is not None else {}
                    return 429, b'{"error": {"message": "rate limited (injected)"}}', hdr
                return 503, b'{"error": {"message": "overloaded (injected)"}}', {}
            if self.echo_authorization:
                return 200, f"upstream said: Authorization: {auth} -- not JSON {{".encode(), {}
            content = self.reply(body)
            if self.huge_reply:
                content = content + " " * self.huge_reply
            pt = sum(len(str(m.get("content", ""))) for m in body.get("messages", [])) // 4 + 4 * len(
                body.get("messages", []))
            ct = len(content) // 4 + 1
            with self._lock:
                self.answered += 1
                self.prompt_tokens += pt
                self.completion_tokens += ct
                self.per_window[int((now - self.t0) // self.window)][1] += pt + ct
            data = json.dumps({
                "id": "loopback", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}}).encode()
            return 200, data, {}
        finally:
            with self._lock:
                self.in_flight -= 1
            if self._cap is not None:
                self._cap.release()

    def __enter__(self) -> LoopbackLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def serve_forever(self) -> None:
        self.server.serve_forever()


def _main() -> None:  # pragma: no cover - used by the benchmarks
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--jitter", type=float, default=0.05)
    ap.add_argument("--max-concurrency", type=int, default=None)
    ap.add_argument("--error-rate", type=float, default=0.0)
    ap.add_argument("--retry-after", type=float, default=None)
    ap.add_argument("--window", type=float, default=1.0)
    a = ap.parse_args()
    srv = LoopbackLLM(latency=a.latency, jitter=a.jitter, max_concurrency=a.max_concurrency, error_rate=a.error_rate,
                      retry_after=a.retry_after, window=a.window, port=a.port)
    print(f"loopback LLM on {srv.base_url} (latency {a.latency} ± {a.jitter} s)", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    _main()
