"""A loopback OpenAI-compatible chat-completions server with a fixed latency, for LLM-path benchmarks.

It answers MegaScale-Social's requests like a slow, deterministic LLM: every reply is computed from
the prompt text alone (the persona card is looked up in the committed fixture, the view, the feed and
the trending post are read back from the rendered user message) and returned as the JSON object the
schema asks for, after ``--latency`` seconds (default 0.2). Requests are served concurrently (one
thread each), so a client with concurrency 64 sees 64 requests in flight. Nothing leaves 127.0.0.1.

Usage::

    python benchmarks/llm_loopback_server.py --port 8765 --latency 0.2     # Ctrl-C prints the request count
    aumann run megascale-social --backend openai --model loopback --base-url http://127.0.0.1:8765/v1 \\
        --concurrency 64 --cache runs/mega.sqlite --cache-mode record

``LoopbackLLM`` is the same server as a context manager for scripts (``bench_megascale_llm.py``).
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_VIEWS = {"convinced the claim is false": -0.8, "doubt the claim": -0.4, "undecided": 0.0,
          "lean toward believing": 0.4, "convinced the claim is true": 0.8}


def _parse(messages: list[dict]) -> dict:
    """The numbers a MegaScale-Social prompt renders (bucket words or the agent's exact numbers)."""
    from aumann.scenarios.megascale_social.fixture import load_fixture

    fx = _parse.fixture if hasattr(_parse, "fixture") else load_fixture()
    _parse.fixture = fx
    system = "\n".join(m.get("content", "") for m in messages if m.get("role") == "system")
    user = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
    persona = next((p for p in fx.personas if p.card in system), fx.personas[0])
    m = re.search(r"view is ([+-]?\d+\.\d+)", user)
    b = float(m.group(1)) if m else next((v for k, v in _VIEWS.items() if k in user), 0.0)
    m = re.search(r"saw (\d+)(?: to (\d+))?(?: or more)? post", user)
    count = 0.0 if m is None else (float(m.group(1)) + float(m.group(2) or m.group(1))) / 2
    m = re.search(r"average position was ([+-]?\d+\.\d+)", user)
    lean = float(m.group(1)) if m else (-0.6 if "mostly saying the claim is false" in user else
                                        0.6 if "mostly saying the claim is true" in user else 0.0)
    proto = next((p for p in fx.prototypes if p.text in user), fx.prototypes[0])
    return {"traits": persona.traits.model_dump(), "belief": b, "volume": count, "lean": lean,
            "trending_stance": proto.stance, "trending_intensity": proto.intensity}


def reply_for(body: dict) -> str:
    """The assistant message for one request body: a Decision JSON object (deterministic)."""
    from aumann.scenarios.megascale_social.prompts import Decision, offline_policy

    ctx = _parse(body.get("messages", []))
    out = offline_policy(ctx, Decision, None)
    # a little prompt-dependent "model noise", deterministic in the text
    h = sum(map(ord, json.dumps(body.get("messages", []), sort_keys=True))) % 97 / 97.0 - 0.5
    out["post"] = round(min(1.0, max(0.0, out["post"] * (1 + 0.1 * h))), 6)
    return json.dumps(out)


class LoopbackLLM:
    """The server in a background thread: ``with LoopbackLLM(latency=0.2) as srv: srv.base_url``."""

    def __init__(self, latency: float = 0.2, port: int = 0) -> None:
        outer = self
        self.latency, self.requests, self.max_in_flight = float(latency), 0, 0
        self._in_flight = 0
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # /v1/models
                data = json.dumps({"object": "list", "data": [{"id": "loopback", "object": "model"}]}).encode()
                self._send(data)

            def do_POST(self):
                with lock:
                    outer.requests += 1
                    outer._in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer._in_flight)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                time.sleep(outer.latency)
                content = reply_for(body)
                with lock:
                    outer._in_flight -= 1
                data = json.dumps({
                    "id": "chatcmpl-loopback", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "loopback"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": sum(len(m.get("content", "")) for m in body.get("messages", [])) // 4,
                              "completion_tokens": len(content) // 4,
                              "total_tokens": 0}}).encode()
                self._send(data)

            def _send(self, data: bytes) -> None:
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 512  # the listen backlog: 64 concurrent clients must not be refused

        self.server = Server(("127.0.0.1", port), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per request (default 0.2)")
    args = ap.parse_args()
    with LoopbackLLM(args.latency, args.port) as srv:
        print(f"loopback LLM at {srv.base_url} (latency {srv.latency} s); Ctrl-C to stop", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        print(f"{srv.requests} request(s), at most {srv.max_in_flight} in flight")


if __name__ == "__main__":
    main()
