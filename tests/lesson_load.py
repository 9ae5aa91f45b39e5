"""Load test of the Lesson page: `streamlit run app.py` serving the shipped pack and N students (contexts of one
headless Chromium, Playwright's async API) walking all ten steps at once. At each step a student opens the step
(timed from the click until its question is drawn) and reveals the result (timed from "Skip: just show me" until the
result is drawn and the script run is over); no error box may appear. The steps render from the pack, so the server
never loads the model: its memory stays that of Streamlit plus the parsed pack.

    python tests/lesson_load.py --students 30        # the full form (a benchmark): prints a JSON report
    python -m pytest -q tests/test_lesson_load.py     # the small form (5 students), part of the test suite
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser_util import ROOT, chromium_path, free_port, wait_http  # noqa: E402
from load_util import memory_mb, start_server, stop_server  # noqa: E402

ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
PACK = ROOT / "assets" / "lesson"


def _pct(xs: list[float], q: float):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else None


class Student:
    def __init__(self, i: int, page, timeout_s: float, report: dict):
        self.i, self.page, self.timeout, self.r = i, page, timeout_s * 1000, report

    async def idle(self, quiet: float = 0.5) -> None:
        end, since = time.time() + self.timeout / 1000, None
        while time.time() < end:
            running = await self.page.locator('[data-testid="stStatusWidget"]').count() > 0
            if running:
                since = None
            elif since is None:
                since = time.time()
            elif time.time() - since >= quiet:
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"student {self.i}: the page was still running")

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


def run(students: int = 5, timeout_s: float = 300) -> dict:
    """Serve the shipped pack, walk `students` students through every step at once; the report."""
    if chromium_path() is None:
        raise RuntimeError("no chromium installed (apt-get install -y chromium)")
    os.environ["EDITKIT_LESSON"] = str(PACK)
    port = free_port()
    log = Path(tempfile.gettempdir()) / f"editkit-lesson-load-{port}.log"
    proc = start_server(port, log, None)
    report: dict = {"students": students, "errors": [], "steps": []}
    peak = [0.0]
    stop = threading.Event()

    def watch():
        while not stop.is_set() and proc.poll() is None:
            try:
                peak[0] = max(peak[0], memory_mb(proc.pid)[1])
            except OSError:
                break
            time.sleep(0.5)

    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url, proc, timeout=240)
        threading.Thread(target=watch, daemon=True).start()
        asyncio.run(_run(url, students, report, timeout_s))
        rss = memory_mb(proc.pid)
    finally:
        stop.set()
        stop_server(proc)
        os.environ.pop("EDITKIT_LESSON", None)
    text = log.read_text(errors="replace")
    for m in re.finditer(r"(Traceback \(most recent call last\)|unexpected error[^\n]*)", text):
        report["errors"].append(f"server log: {text[m.start():m.start() + 300]}")
    steps = report.pop("steps")
    opens = [s["open_s"] for s in steps]
    reveals = [s["reveal_s"] for s in steps]
    both = [s["open_s"] + s["reveal_s"] for s in steps]
    return {"students": students, "steps_walked": len(steps), "errors": len(report["errors"]),
            "error_list": report["errors"][:20],
            "open_p50_s": _pct(opens, 0.5), "open_p95_s": _pct(opens, 0.95),
            "reveal_p50_s": _pct(reveals, 0.5), "reveal_p95_s": _pct(reveals, 0.95),
            "step_p95_s": _pct(both, 0.95), "step_max_s": _pct(both, 1.0),
            "per_step_p95_s": {n: _pct([s["open_s"] + s["reveal_s"] for s in steps if s["step"] == n], 0.95)
                               for n in range(1, 11)},
            "server_rss_end_mb": round(rss[0]), "server_rss_peak_mb": round(max(peak[0], rss[1])),
            "wall_s": report.get("wall_s"), "server_log": str(log)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=300, help="seconds any one wait may take")
    args = ap.parse_args(argv)
    out = run(args.students, args.timeout)
    print(json.dumps(out, indent=1))
    return 0 if out["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
