"""Fakes for the LLM tests: an httpx mock transport and a tiny OpenAI-compatible loopback server."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

SECRET = "sk-test-SECRET-5f3e9a1c7b2d"


def completion(content: str, prompt_tokens: int = 11, completion_tokens: int = 7) -> dict:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


class Script:
    """A scripted server: each request pops the next reply (the last one repeats); counts requests."""

    def __init__(self, *replies: Callable[[httpx.Request], httpx.Response] | dict | int | str) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []
        self.bodies: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.content:
            self.bodies.append(json.loads(request.content))
        reply = self.replies[min(len(self.requests) - 1, len(self.replies) - 1)]
        if callable(reply):
            return reply(request)
        if isinstance(reply, int):
            return httpx.Response(reply, json={"error": {"message": f"status {reply}: Incorrect API key "
                                                         f"provided: {SECRET[:8]}...", "type": "x"}})
        if isinstance(reply, str):
            return httpx.Response(200, json=completion(reply))
        return httpx.Response(200, json=reply)

    @property
    def calls(self) -> int:
        return len(self.requests)


def client_for(handler: Callable[[httpx.Request], httpx.Response], base_url: str = "http://llm.test/v1"):
    import openai

    return openai.OpenAI(api_key=SECRET, base_url=base_url,
                         http_client=httpx.Client(transport=httpx.MockTransport(handler)))


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class LoopbackServer:
    """An OpenAI-compatible /v1/chat/completions server on 127.0.0.1 (replies from a function)."""

    def __init__(self, reply: Callable[[dict], str], delay: float = 0.0) -> None:
        outer = self
        self.reply, self.delay, self.calls = reply, delay, 0
        self.in_flight = self.max_in_flight = 0
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                with lock:
                    outer.calls += 1
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if outer.delay:
                    time.sleep(outer.delay)
                with lock:
                    outer.in_flight -= 1
                data = json.dumps(completion(outer.reply(body))).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
