"""A hostile visitor of the real server (`streamlit run app.py`, the full tier): websocket sessions speaking the
browser's protocol (tests/ws_util.py), from other addresses through X-Forwarded-For as a reverse proxy on the same
machine sends it (Streamlit's uvicorn takes the client's address from it), on the embedded model.

- `?teacher=1` from another machine is refused with the setting to set; from this machine it opens teacher mode;
- a crafted model name that the picker does not offer is never loaded;
- a flood of jobs from one address: beyond its quota each is refused with the setting, while another address's
  job still queues and shows its place;
- a session that disconnects mid-job: its job is cancelled and its memory reservation returned (the Server box
  of another session shows no job and nothing in use), and the server log holds no traceback.
"""
from __future__ import annotations

import asyncio
import re
import tempfile
import time
from pathlib import Path

import pytest

from browser_util import ROOT, free_port, wait_http
from load_util import run_async, start_server, stop_server
from ws_util import WsSession

pytestmark = pytest.mark.load
pytest.importorskip("websockets")

SAMPLES = 40  # a trace long enough (minutes on 2 cores) to be still running when the test acts on it
TRACE = {"trace_prompt": "The Eiffel Tower is located in the city of", "trace_subject": "The Eiffel Tower"}
SUBMIT = "FormSubmitter:trace_form-Trace"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("served")
    config = folder / "editkit.toml"
    config.write_text("[limits]\njobs = 1\nvisitor_jobs = 2\n", encoding="utf-8")
    port = free_port()
    log = Path(tempfile.gettempdir()) / f"editkit-hostile-{port}.log"
    proc = start_server(port, log, None, env={"EDITKIT_CONFIG": str(config),
                                               "EDITKIT_LESSON": str(ROOT / "assets" / "lesson")})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url, proc, timeout=240)
        yield url, log
    finally:
        stop_server(proc)
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "unexpected error" not in text, text[-3000:]


def remote(address: str) -> dict:
    return {"X-Forwarded-For": address}


def run(coro):
    return run_async(coro)


def test_teacher_mode_from_another_machine_is_refused(server):
    url, _ = server

    async def go():
        async with WsSession(url, headers=remote("203.0.113.5")) as s:
            await s.run("lesson", query="teacher=1")
            assert not s.errors(), s.errors()
            assert s.has("needs a passphrase") and s.has("teacher.passphrase = (not set), the default")
            assert "Teacher" not in s.texts()
        async with WsSession(url) as s:  # the operator's own browser
            await s.run("lesson", query="teacher=1")
            assert "Teacher" in s.texts() and not s.has("needs a passphrase")
    run(go())


def test_a_crafted_model_name_is_never_loaded(server):
    url, log = server

    async def go():
        async with WsSession(url, headers=remote("203.0.113.6")) as s:
            await s.run("")
            assert "other: hub id, folder or GGUF file" not in s.widgets["model_choice"][1].options
            await s.run(model_choice="../../../etc/passwd")
            assert not s.errors(), s.errors()
            assert not any("etc/passwd" in t for t in s.texts())
            assert s.has("Prediction for")  # the page goes on with an offered model
    run(go())
    assert "etc/passwd" not in log.read_text(errors="replace")


async def start_trace(url: str, address: str | None) -> WsSession:
    """A session that opened Causal tracing and submitted a long trace; returns once the page shows the job
    (running, waiting, or refused)."""
    s = WsSession(url, headers=remote(address) if address else None)
    await s.__aenter__()
    await s.run("causal_tracing")
    def seen(sess) -> bool:  # past the bar's first text: running, waiting with its place, or refused
        return any((t.startswith("causal trace:") and t != "causal trace: waiting for a turn") or "already has" in t
                   for t in sess.texts())

    await s.run(press=SUBMIT, until=seen, trace_samples=SAMPLES, trace_kinds=["hidden"], **TRACE)
    return s


async def server_box(url: str) -> str:
    """The Server box's title and memory line, as another session sees them."""
    async with WsSession(url) as s:
        await s.run("")
        return " | ".join(t for t in s.texts() if t.startswith("Server:") or "in use" in t)


def test_a_flood_from_one_address_and_a_disconnect_mid_job(server):
    url, _ = server

    async def go():
        first = await start_trace(url, "198.51.100.7")  # runs (one job slot)
        second = await start_trace(url, "198.51.100.7")  # waits behind it
        third = await start_trace(url, "198.51.100.7")  # over the address's quota of 2
        assert any("your address already has 2 long jobs" in e and "limits.visitor_jobs = 2, from" in e
                   for e in third.errors()), third.texts()
        other = await start_trace(url, "198.51.100.8")  # another visitor: queued, its place shown
        assert other.has("ahead of yours"), other.texts()
        box = await server_box(url)
        assert "Server: 1 job(s) running, 2 waiting" in box, box
        for s in (first, second, third, other):  # every browser closes mid-job
            await s.close()
        deadline, box = time.time() + 600, ""  # a job stops at its next progress step (a loaded machine: minutes)
        while time.time() < deadline:
            box = await server_box(url)
            if "Server: 0 job(s) running, 0 waiting" in box:
                break
            await asyncio.sleep(2)
        assert "Server: 0 job(s) running, 0 waiting" in box and re.search(r"\(0\.0 MB in use", box), box
    run(go())
