"""Ctrl-C (or SIGTERM's exit) while LLM decisions are in flight ends the run within one request's timeout.

Measured before the fix, ``aumann run social-llm --backend openai`` against a server that never finishes a reply
(``--llm-timeout 5 --max-retries 2``, 4 agents): SIGINT 4 s in, exit 140.5 s later (12 attempts logged): the
requests queued behind the structured-output probe and the concurrency window were still sent, and every failed
attempt retried with its doubled timeout, before the pool let the process go. After: 4.2 s, one attempt.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from pydantic import BaseModel, Field

from aumann.simulators.llm import OpenAIBackend
from tests.simulators.llm_fakes import LoopbackServer


class Work(BaseModel):
    work: float = Field(ge=0.0, le=1.0)


GOOD = '{"work": 0.5}'


@pytest.fixture(autouse=True)
def _ctrl_c_raises():
    """These tests send the process a SIGINT and check what the backend does with the KeyboardInterrupt, so Python's
    own handler must be installed and SIGINT unblocked in the main thread while they run, whatever the process
    inherited. A shell without job control starts a background job (`pytest &`, `nohup bash .ci/run &`) with SIGINT
    ignored, and Python then keeps ignoring it: all three failed with "DID NOT RAISE KeyboardInterrupt" in a CI run
    started that way, on both xdist workers. A state other than Python's default is said as a warning."""
    import warnings

    handler = signal.getsignal(signal.SIGINT)
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    if handler is not signal.default_int_handler or blocked:
        warnings.warn(f"SIGINT's handler was {handler!r}{' and SIGINT was blocked' if blocked else ''} before "
                      "this test; Python's default is installed for it", RuntimeWarning, stacklevel=1)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if handler is not None:  # (None: a handler installed from C, which Python cannot put back)
            signal.signal(signal.SIGINT, handler)
        if blocked:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


@pytest.mark.timeout(120)
def test_an_interrupt_while_decisions_time_out_stops_sending_and_retrying():
    with LoopbackServer(lambda body: GOOD, delay=2.0) as srv:  # every attempt times out (0.5 s, then 1, 2, 4 s)
        b = OpenAIBackend(model="m", base_url=srv.base_url, timeout=0.5, max_retries=3, concurrency=2)
        reqs = [{"messages": [{"role": "user", "content": f"agent {i}: decide"}], "schema": Work} for i in range(4)]
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        start = time.monotonic()
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                b.decide_many(reqs, return_exceptions=True)
            b.close(keep_failed=False)  # (waits for the workers, as the run's way out does)
            elapsed = time.monotonic() - start
        finally:
            timer.cancel()
        calls = srv.calls
    # one attempt in flight when the interrupt came (0.5 s timeout): nothing queued is sent, nothing is retried
    # (retrying would take 0.5 + 1 + 2 + 4 s; 5 s leaves a loaded machine room to end the attempt in flight)
    assert elapsed < 5.0, elapsed
    assert calls <= 2, calls


def test_a_batch_after_an_interrupted_one_is_sent_and_answered():
    """(a notebook: a cell interrupted, then run again) the stop of the interrupted batch does not outlive it."""
    with LoopbackServer(lambda body: GOOD, delay=1.0) as srv:
        b = OpenAIBackend(model="m", base_url=srv.base_url, timeout=0.3, max_retries=1, concurrency=1)
        timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                b.decide_many([{"messages": [{"role": "user", "content": "first"}], "schema": Work}])
        finally:
            timer.cancel()
        srv.delay = 0.0
        try:
            again = b.decide([{"role": "user", "content": "again"}], Work)
        except KeyboardInterrupt as exc:  # (not let through: pytest would end the session)
            pytest.fail(f"the interrupted batch's stop outlived it: {exc}")
        assert again == Work(work=0.5)
        b.close()


@pytest.mark.timeout(120)
def test_an_interrupt_while_requests_wait_for_a_rate_slot_ends_the_batch_at_once():
    """``--rpm`` paces requests one by one: with rpm=6 the fourth of four queued requests waits 30 s for its slot.
    Before the fix the interrupt had to sit those waits out (``aumann run megascale-social --rpm 2 --concurrency 4``
    against the loopback server: exit 171.5 s after SIGINT); now the waiting requests raise and are never sent."""
    with LoopbackServer(lambda body: GOOD) as srv:
        b = OpenAIBackend(model="m", base_url=srv.base_url, timeout=5.0, max_retries=0, concurrency=4, rpm=6)
        reqs = [{"messages": [{"role": "user", "content": f"agent {i}: decide"}], "schema": Work} for i in range(4)]
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        start = time.monotonic()
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                b.decide_many(reqs, return_exceptions=True)
            b.close(keep_failed=False)
            elapsed = time.monotonic() - start
        finally:
            timer.cancel()
        calls = srv.calls
    assert elapsed < 5.0, elapsed
    assert calls == 1, calls  # the bucket's one slot at the start; the three waiting were never sent


def test_a_stopped_token_bucket_wakes_its_waiters_and_serves_again_once_resumed():
    from aumann.simulators.llm.ratelimit import TokenBucket

    bucket = TokenBucket(rate=0.01, capacity=1.0)  # a slot every 100 s after the first
    bucket.acquire()
    got: list[BaseException | float] = []

    def wait() -> None:
        try:
            got.append(bucket.acquire())
        except KeyboardInterrupt as exc:
            got.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.2)
    bucket.stop()
    waiter.join(timeout=5.0)
    assert not waiter.is_alive() and isinstance(got[0], KeyboardInterrupt)
    bucket.resume()
    bucket.level = 1.0  # (a refilled bucket) serves at once again
    assert bucket.acquire() == 0.0
