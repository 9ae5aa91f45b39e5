"""Load test of the Lesson page: `streamlit run app.py` serving the shipped pack and N students (contexts of one
headless Chromium, Playwright's async API) walking steps 1-10 (not step 11) at once. At each step a student opens
the step (timed from the click until its question is drawn) and reveals the result (timed from "Skip: just show me"
until the result is drawn and the script run is over); no error box may appear. The steps render from the pack, so
the server never loads the model: its memory stays that of Streamlit plus the parsed pack.

    python benchmarks/load/lesson_load.py --students 30        # the full form (a benchmark): prints a JSON report
    python benchmarks/load/lesson_load.py --students 30 --client ws   # the same walk by websocket clients, no browsers
    python -m pytest -q tests/test_lesson_load.py     # the small form (5 students), part of the test suite
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # the load helpers the tests share
from browser_util import ROOT, chromium_path, free_port, wait_http  # noqa: E402
from load_util import PeakMemory, memory_mb, page_idle, start_server, stop_server  # noqa: E402

ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
PACK = ROOT / "assets" / "lesson"


def _pct(xs: list[float], q: float):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else None


class Student:
    def __init__(self, i: int, page, timeout_s: float, report: dict):
        self.i, self.page, self.timeout, self.r = i, page, timeout_s * 1000, report

    async def idle(self, quiet: float = 0.5) -> None:
        await page_idle(self.page, quiet, self.timeout / 1000, f"student {self.i}", poll=0.05)

    async def errors(self, where: str) -> None:
        boxes = self.page.locator(ERRORS)
        for k in range(await boxes.count()):
            self.r["errors"].append(f"student {self.i} {where}: {(await boxes.nth(k).inner_text())[:300]}")

    async def walk(self, url: str) -> None:
        page = self.page
        await page.goto(f"{url}/lesson")
        await page.get_by_role("heading", name="Lesson: locate, then edit").first.wait_for(timeout=self.timeout)
        await self.idle()
        for step in range(1, 11):
            start = time.time()
            await page.get_by_role("radiogroup", name="Step").get_by_text(str(step), exact=True).click()
            await page.get_by_role("heading", name=re.compile(rf"^Step {step}\. ")).wait_for(timeout=self.timeout)
            await page.get_by_role("button", name="Skip: just show me").wait_for(timeout=self.timeout)
            opened = time.time()
            await self.idle(quiet=0.3)
            await page.get_by_role("button", name="Skip: just show me").click()
            clicked = time.time()
            await page.get_by_text("Skipped: the result is shown").first.wait_for(timeout=self.timeout)
            shown = time.time()
            await self.idle(quiet=0.3)
            await self.errors(f"step {step}")
            self.r["steps"].append({"student": self.i, "step": step, "open_s": opened - start,
                                    "reveal_s": shown - clicked, "reveal_done_s": time.time() - 0.3 - clicked})


class WsStudent:
    """A student as Streamlit's own browser client talks to the server, without a browser: one websocket
    (/_stcore/stream), BackMsg rerun requests carrying the widget states (the Step radio's choice, a form submit
    button's trigger) and the ForwardMsg deltas of each script run read until it finishes. It measures what the
    server costs a class; the browser form adds each student's page rendering, which runs on their own laptop in a
    class but here on the server's two cores."""

    def __init__(self, i: int, timeout_s: float, report: dict, think_s: float = 0.0):
        self.i, self.timeout, self.r = i, timeout_s, report
        self.states: dict = {}  # widget id -> WidgetState (sent with every rerun, as the browser does)
        self.think = think_s  # mean seconds a student reads before each click (0: click at once)
        self.rng = random.Random(i)

    async def pause(self) -> None:
        """A student's reading time before a click: uniform in [0, 2 x think] (0: none)."""
        if self.think > 0:
            await asyncio.sleep(self.rng.uniform(0, 2 * self.think))

    async def run_once(self, ws, trigger: str | None = None) -> list:
        """Ask for a script run (with `trigger`: a button's id pressed once) and read its elements until it
        finishes successfully (a run ended early for a rerun is followed by the rerun's)."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = BackMsg()
        msg.rerun_script.page_name = "lesson"
        for state in self.states.values():
            msg.rerun_script.widget_states.widgets.append(state)
        if trigger:
            pressed = msg.rerun_script.widget_states.widgets.add()
            pressed.id, pressed.trigger_value = trigger, True
        await ws.send(msg.SerializeToString())
        elements = []
        while True:
            fwd = ForwardMsg()
            fwd.ParseFromString(await asyncio.wait_for(ws.recv(), self.timeout))
            kind = fwd.WhichOneof("type")
            if kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                el = fwd.delta.new_element
                elements.append((el.WhichOneof("type"), getattr(el, el.WhichOneof("type"))))
            elif kind == "script_finished":
                if fwd.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    elements = []
                    continue
                if fwd.script_finished != ForwardMsg.FINISHED_SUCCESSFULLY:
                    raise RuntimeError(f"the script run ended with status {fwd.script_finished}")
                return elements

    def errors(self, elements, where: str) -> None:
        from streamlit.proto.Alert_pb2 import Alert

        for kind, el in elements:
            if kind == "exception" or (kind == "alert" and el.format == Alert.ERROR):
                text = el.message if kind == "exception" else el.body
                self.r["errors"].append(f"student {self.i} {where}: {kind}: {text[:300]}")

    @staticmethod
    def find(elements, kind: str, label: str):
        return next((el for k, el in elements if k == kind and el.label == label), None)

    async def walk(self, url: str) -> None:
        import websockets
        from streamlit.proto.WidgetStates_pb2 import WidgetState

        async with websockets.connect(url.replace("http", "ws", 1) + "/_stcore/stream", max_size=None,
                                      subprotocols=["streamlit"], open_timeout=self.timeout) as ws:
            elements = await self.run_once(ws)
            for step in range(1, 11):
                radio = self.find(elements, "radio", "Step")
                if radio is None:
                    raise RuntimeError(f"step {step}: no Step radio on the page")
                self.states[radio.id] = WidgetState(id=radio.id, string_value=radio.options[step - 1])
                await self.pause()
                start = time.time()
                elements = await self.run_once(ws)
                opened = time.time()
                if not any(k == "heading" and el.body.startswith(f"Step {step}. ") for k, el in elements):
                    raise RuntimeError(f"step {step}: its heading was not drawn")
                self.errors(elements, f"step {step}")
                skip = self.find(elements, "button", "Skip: just show me")
                if skip is None:
                    raise RuntimeError(f"step {step}: no 'Skip: just show me' button")
                await self.pause()
                clicked = time.time()
                elements = await self.run_once(ws, trigger=skip.id)
                shown = time.time()
                if not any("Skipped: the result is shown" in getattr(el, "body", "") for _, el in elements):
                    raise RuntimeError(f"step {step}: the result was not revealed")
                self.errors(elements, f"step {step} revealed")
                self.r["steps"].append({"student": self.i, "step": step, "open_s": opened - start,
                                        "reveal_s": shown - clicked, "reveal_done_s": shown - clicked})


async def _run(url: str, n: int, report: dict, timeout_s: float) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium_path(), headless=True,
                                          args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        students = []
        for i in range(n):
            ctx = await browser.new_context(viewport={"width": 1300, "height": 900})
            page = await ctx.new_page()
            page.set_default_timeout(timeout_s * 1000)
            students.append(Student(i, page, timeout_s, report))

        async def guarded(s: Student):
            try:
                await s.walk(url)
            except Exception as exc:  # noqa: BLE001 - reported, with a screenshot
                shot = Path(tempfile.gettempdir()) / f"editkit-lesson-load-{s.i}.png"
                try:
                    await s.page.screenshot(path=str(shot), full_page=True)
                except Exception:  # noqa: BLE001
                    pass
                report["errors"].append(f"student {s.i}: {type(exc).__name__}: {str(exc)[:300]} ({shot})")

        start = time.time()
        await asyncio.gather(*(guarded(s) for s in students))
        report["wall_s"] = round(time.time() - start, 1)
        await browser.close()


async def _run_ws(url: str, n: int, report: dict, timeout_s: float, think_s: float = 0.0) -> None:
    """`n` websocket students (WsStudent) at once, each reading `think_s` seconds on average before a click."""
    students = [WsStudent(i, timeout_s, report, think_s) for i in range(n)]

    async def guarded(s: WsStudent):
        try:
            await s.walk(url)
        except Exception as exc:  # noqa: BLE001 - reported
            report["errors"].append(f"student {s.i}: {type(exc).__name__}: {str(exc)[:300]}")

    start = time.time()
    await asyncio.gather(*(guarded(s) for s in students))
    report["wall_s"] = round(time.time() - start, 1)


def run(students: int = 5, timeout_s: float = 300, client: str = "browser", think_s: float = 0.0) -> dict:
    """Serve the shipped pack, walk `students` students through every step at once (`client`: "browser" =
    Chromium contexts, "ws" = Streamlit websocket clients, each reading `think_s` s on average before a click;
    0 = every click as soon as the last answer came: the server saturated); the report."""
    if client == "browser" and chromium_path() is None:
        raise RuntimeError("no chromium installed (apt-get install -y chromium)")
    os.environ["EDITKIT_LESSON"] = str(PACK)
    port = free_port()
    log = Path(tempfile.gettempdir()) / f"editkit-lesson-load-{port}.log"
    proc = start_server(port, log, None)
    report: dict = {"students": students, "errors": [], "steps": []}
    watcher = PeakMemory(proc)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url, proc, timeout=240)
        watcher.start()
        if client == "browser":
            asyncio.run(_run(url, students, report, timeout_s))
        else:
            asyncio.run(_run_ws(url, students, report, timeout_s, think_s))
        rss = memory_mb(proc.pid)
    finally:
        watcher.stop()
        stop_server(proc)
        os.environ.pop("EDITKIT_LESSON", None)
    text = log.read_text(errors="replace")
    for m in re.finditer(r"(Traceback \(most recent call last\)|unexpected error[^\n]*)", text):
        report["errors"].append(f"server log: {text[m.start():m.start() + 300]}")
    steps = report.pop("steps")
    opens = [s["open_s"] for s in steps]
    reveals = [s["reveal_s"] for s in steps]
    both = [s["open_s"] + s["reveal_s"] for s in steps]
    return {"students": students, "client": client, "think_s": think_s, "steps_walked": len(steps),
            "errors": len(report["errors"]),
            "error_list": report["errors"][:20],
            "open_p50_s": _pct(opens, 0.5), "open_p95_s": _pct(opens, 0.95),
            "reveal_p50_s": _pct(reveals, 0.5), "reveal_p95_s": _pct(reveals, 0.95),
            "step_p95_s": _pct(both, 0.95), "step_max_s": _pct(both, 1.0),
            "per_step_p95_s": {n: _pct([s["open_s"] + s["reveal_s"] for s in steps if s["step"] == n], 0.95)
                               for n in range(1, 11)},
            "server_rss_end_mb": round(rss[0]), "server_rss_peak_mb": round(max(watcher.peak, rss[1])),
            "wall_s": report.get("wall_s"), "server_log": str(log)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=300, help="seconds any one wait may take")
    ap.add_argument("--client", choices=("browser", "ws"), default="browser",
                    help="browser: Chromium contexts (each page also renders on this machine); ws: Streamlit "
                         "websocket clients (the server's cost alone)")
    ap.add_argument("--think", type=float, default=0.0,
                    help="ws: mean seconds a student reads before each click (uniform 0..2x; 0 = none)")
    args = ap.parse_args(argv)
    out = run(args.students, args.timeout, args.client, args.think)
    print(json.dumps(out, indent=1))
    return 0 if out["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
