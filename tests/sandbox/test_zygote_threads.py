"""The evaluator's zygote is shared by every evaluation of the process, whatever thread runs it.

Three evaluations in threads of one process failed about one run in two with BrokenPipeError
raised out of evaluate(): bubblewrap's --die-with-parent is PR_SET_PDEATHSIG, whose "parent" is
the *thread* that started it, so the zygote (and every child it had forked for the other
evaluations) was SIGKILLed when the evaluation thread that happened to start it returned; the
other evaluations' error paths then asked the dead zygote how their child ended and raised.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from sandbox import EvalOptions, evaluate, zygote
from sandbox.isolation import scrubbed_env
from sandbox.schema import Status
from tests.sandbox.helpers import candidate, task


def _opts() -> EvalOptions:
    return EvalOptions(backend="cpu", compile_baseline=False, timing_budget_s=0.2, min_timed_calls=10, warmup_calls=1)


def test_zygote_outlives_the_thread_that_started_it():
    zygote.shutdown()  # a fresh zygote, started below by a thread that then ends
    box: dict = {}
    starter = threading.Thread(target=lambda: box.setdefault("client", zygote.get_client(scrubbed_env())))
    starter.start()
    starter.join()
    client = box["client"]
    if client is None:
        pytest.skip("no zygote on this host")
    deadline = time.monotonic() + 1.5  # PDEATHSIG kills within milliseconds of the thread's end
    while time.monotonic() < deadline and client.proc.poll() is None:
        time.sleep(0.05)
    assert client.proc.poll() is None, f"the zygote died with its starter thread (rc {client.proc.poll()})"
    assert client.ping()
    assert zygote.get_client(scrubbed_env()) is client


@pytest.mark.parametrize("how", ["close_socket", "kill_zygote"])
def test_lost_zygote_mid_evaluation_gives_a_result(how):
    """The zygote connection breaking while an evaluation's children run (as another thread's
    end did): a runtime_error result naming the zygote, never an exception out of evaluate."""
    client = zygote.get_client(scrubbed_env())
    if client is None:
        pytest.skip("no zygote on this host")
    done: list[str] = []

    def on_progress(step: str, _detail: dict) -> None:
        if step == "timing" and not done:
            done.append(step)
            if how == "close_socket":
                client.sock.close()
            else:
                os.killpg(client.proc.pid, signal.SIGKILL)
                client.proc.wait()

    try:
        res = evaluate(task("softmax_tiny.py"), candidate("softmax_cpp"), _opts(), on_progress=on_progress)
    finally:
        if done:
            zygote.shutdown()  # (the broken client; the next evaluation starts a new zygote)
    assert done, "the evaluation never reached its timing step"
    assert res.status == Status.RUNTIME_ERROR, (res.status, res.reasons)
    assert any("zygote" in r for r in res.reasons), res.reasons
    # and the next evaluation gets a working zygote again
    again = evaluate(task("softmax_tiny.py"), candidate("softmax_cpp"), _opts())
    assert again.status == Status.OK, again.reasons


@pytest.mark.slow
def test_three_evaluations_in_threads_of_one_process():
    zygote.shutdown()  # the first evaluation's thread starts the zygote the three share
    out: list = []

    def go() -> None:
        try:
            out.append(evaluate(task("softmax_tiny.py"), candidate("softmax_cpp"), _opts()))
        except BaseException as exc:  # the contract: evaluate never raises
            out.append(exc)

    threads = [threading.Thread(target=go) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [getattr(r, "status", r) for r in out] == [Status.OK] * 3
