"""Headless Chromium over the DevTools protocol (``--remote-debugging-pipe``; no extra Python package).

:func:`open_page` loads a local HTML file, collects console errors, uncaught exceptions, log-domain
errors (failed loads, blocked requests) and every network request, waits for the page to settle and
takes a full-page PNG screenshot. Used by the browser tests; also a tool::

    python -m tests.browser runs/x/report.html shot.png
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio")


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageResult:
    png: bytes
    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    height: int = 0
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def errors(self) -> list[str]:
        return self.console_errors + self.exceptions + self.log_errors


class _Pipe:
    def __init__(self, proc: subprocess.Popen, write_fd: int, read_fd: int) -> None:
        self.proc, self.w, self.r = proc, write_fd, read_fd
        self.buf = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 60.0) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            for m in self._read(deadline):
                if m.get("id") == self.next_id:
                    if "error" in m:
                        raise RuntimeError(f"{method}: {m['error']}")
                    return m.get("result", {})
                self.events.append(m)

    def pump(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.events += self._read(deadline, once=True)

    def wait_event(self, method: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e.get("method") == method for e in self.events):
                return True
            self.events += self._read(deadline, once=True)
        return any(e.get("method") == method for e in self.events)

    def _read(self, deadline: float, once: bool = False) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                out.append(json.loads(raw))
            if out or (once and time.monotonic() >= deadline):
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                if once:
                    return out
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self.r], [], [], min(left, 0.25))
            if ready:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise RuntimeError("Chromium closed the DevTools pipe")
                self.buf += chunk
            elif once:
                return out


#: counts the canvases drawn, shadow DOMs included (Bokeh draws into shadow roots)
CANVASES = """(() => { let n = 0; const walk = (root) => root.querySelectorAll('*').forEach((el) => {
  if (el.tagName === 'CANVAS' && el.width > 0 && el.height > 0) n++; if (el.shadowRoot) walk(el.shadowRoot); });
  walk(document); return n; })()"""


def open_page(path: str | os.PathLike[str], *, width: int = 1280, settle: float = 2.0, max_height: int = 16000,
              timeout: float = 90.0, evaluate: dict[str, str] | None = None) -> PageResult:
    """Open ``path`` from disk in headless Chromium; return a full-page screenshot and what went wrong.

    ``evaluate`` maps names to JavaScript expressions evaluated once the page has settled
    (their values land in ``PageResult.values``).
    """
    exe = chromium_path()
    if exe is None:
        raise FileNotFoundError("no chromium executable on PATH")
    url = Path(path).resolve().as_uri()
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()

    def setup() -> None:  # runs in the child: DevTools reads fd 3 and writes fd 4
        a = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
        b = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
        os.dup2(a, 3)
        os.dup2(b, 4)

    profile = tempfile.mkdtemp(prefix="aumann-chromium-")
    proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
                             f"--window-size={width},900", "about:blank"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=setup,
                            pass_fds=(3, 4), close_fds=True)
    os.close(to_child_r)
    os.close(from_child_w)
    pipe = _Pipe(proc, to_child_w, from_child_r)
    try:
        targets = pipe.send("Target.getTargets", timeout=timeout)["targetInfos"]
        page = next((t for t in targets if t["type"] == "page"), None)
        tid = page["targetId"] if page else pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = pipe.send("Target.attachToTarget", {"targetId": tid, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            pipe.send(f"{domain}.enable", session=sid)
        pipe.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=sid)
        pipe.events.clear()
        pipe.send("Page.navigate", {"url": url}, session=sid, timeout=timeout)
        pipe.wait_event("Page.loadEventFired", timeout)
        pipe.pump(settle)
        metrics = pipe.send("Page.getLayoutMetrics", session=sid)
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        height = int(min(max(900, size["height"]), max_height))
        pipe.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=sid)
        pipe.pump(0.8)
        shot = pipe.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False}, session=sid,
                         timeout=timeout)
        res = PageResult(png=base64.b64decode(shot["data"]), height=height)
        for name, expr in (evaluate or {}).items():
            out = pipe.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=sid)
            res.values[name] = out.get("result", {}).get("value")
        for e in pipe.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                res.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                res.exceptions.append(str(d.get("exception", {}).get("description") or d.get("text")))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                res.log_errors.append(f"{p['entry'].get('text')} {p['entry'].get('url', '')}")
            elif m == "Network.requestWillBeSent":
                res.requests.append(p["request"]["url"])
        return res
    finally:
        try:
            pipe.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        os.close(to_child_w)
        os.close(from_child_r)
        shutil.rmtree(profile, ignore_errors=True)


def pixel_stats(png: bytes) -> tuple[float, float]:
    """(standard deviation of the grey levels, fraction of pixels that are not near-white)."""
    import io

    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.float64)
    return float(img.std()), float((img < 235).mean())


if __name__ == "__main__":  # pragma: no cover
    r = open_page(sys.argv[1], evaluate={"canvases": CANVASES})
    Path(sys.argv[2]).write_bytes(r.png)
    print(json.dumps({"errors": r.errors, "canvases": r.values.get("canvases"),
                      "requests": sorted(set(u.split(":")[0] for u in r.requests)),
                      "height": r.height, "pixel_std_nonwhite": pixel_stats(r.png)}, indent=1))
