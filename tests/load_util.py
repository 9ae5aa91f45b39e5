"""Load test of the real app: `streamlit run app.py` on localhost and N concurrent browser sessions (contexts of one
headless Chromium, driven by Playwright's async API) on the embedded Gemma 3 270M.

Roles (tracer, editor, predictor, tracer, ...: the small form has one of each, the full form two of each):
- predictor: home-page predictions, alternating between the editors' fact prompts, for as long as the long jobs
  run; each prediction is timed (Enter to the new "Prediction for ..." line) and must read exactly as the base
  model's (a difference is a leak of somebody's edit);
- tracer: a causal trace of an editor's fact prompt (2 noise samples, the hidden-state panel and severing); its
  clean answer and probability must be the base model's;
- editor: a ROME edit of its own fact on Edit & compare, kept in its session, then home-page predictions: its own
  fact must show its new target; the other fact must show the base model's top token, never another editor's
  target (its own edit may move that probability a little: specificity, not a leak).
Every page is checked for error boxes after every action. Memory: the server's resident set after the model
loaded and after every role is done (sessions still open, edits kept) against one copy of the weights, and its peak
(VmHWM), which also holds the jobs' working memory.

    python tests/load_util.py --sessions 6                 # the full form (benchmark), prints a JSON report
    python tests/load_util.py --sessions 6 --ray local:2   # the same with the server's item jobs on Ray workers
    python -m pytest -q tests/test_load.py                  # the small form (3 sessions), part of the test suite
"""
from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser_util import APP, ROOT, chromium_path, free_port, wait_http  # noqa: E402

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script: editkit importable
# the load drivers' full forms (class_load.py, lesson_load.py): benchmarks, whose small forms the tests run
DRIVERS = ROOT / "benchmarks" / "load"


def driver(name: str) -> Any:
    """The load driver benchmarks/load/<name>.py as a module (its `run`), imported as its script runs it."""
    if str(DRIVERS) not in sys.path:
        sys.path.insert(0, str(DRIVERS))
    return importlib.import_module(name)

ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
FACTS = [  # (prompt, request template, subject, new target): ROME flips the top token of both on Gemma 3 270M
    # (' Paris' 0.76 -> ' Rome' 0.99, ' French' 0.34 -> ' English' 0.99)
    ("The Eiffel Tower is located in the city of", "{} is located in the city of", "The Eiffel Tower", "Rome"),
    ("The mother tongue of Danielle Darrieux is", "The mother tongue of {} is", "Danielle Darrieux", "English"),
]
LINE = re.compile(r"most likely next token (.+) \(p = ([0-9.]+)\)")
ANSWER = re.compile(r"Answer (.+): clean p = ([0-9.]+)")
FILLER = "The Eiffel Tower is in"  # typed first when a prompt is already in the box (a new line must appear)


@dataclass
class Report:
    sessions: int
    roles: list[str]
    errors: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    predictions: list[dict] = field(default_factory=list)  # {"start", "end", "seconds", "prompt", "session"}
    jobs: list[dict] = field(default_factory=list)  # {"kind", "start", "end", "session"}
    checks: int = 0  # comparisons against the base model that passed
    rss_base_mb: float = 0.0
    rss_peak_mb: float = 0.0
    rss_end_mb: float = 0.0  # after every role is done, the sessions still open (the editors keep their edits)
    weights_mb: float = 0.0
    wall_s: float = 0.0
    queue_waits: int = 0
    cancelled: bool | None = None

    def summary(self) -> dict:
        lat = sorted(p["seconds"] for p in self.predictions)
        loaded = sorted(p["seconds"] for p in self.predictions if self._busy(p))
        pct = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None  # noqa: E731
        return {
            "sessions": self.sessions, "roles": self.roles, "errors": len(self.errors), "error_list": self.errors[:20],
            "leaks": len(self.leaks), "leak_list": self.leaks[:20], "checks_passed": self.checks,
            "predictions": len(lat), "latency_p50_s": pct(lat, 0.5), "latency_p95_s": pct(lat, 0.95),
            "latency_max_s": lat[-1] if lat else None,
            "predictions_during_2_traces_and_an_edit": len(loaded),
            "latency_p50_s_during_2_traces_and_an_edit": pct(loaded, 0.5),
            "latency_p95_s_during_2_traces_and_an_edit": pct(loaded, 0.95),
            "jobs": [{k: (round(v, 1) if isinstance(v, float) else v) for k, v in j.items()} for j in self.jobs],
            "server_rss_after_model_load_mb": round(self.rss_base_mb), "server_rss_peak_mb": round(self.rss_peak_mb),
            "weights_mb": round(self.weights_mb),
            "server_rss_end_mb": round(self.rss_end_mb),
            # the peak includes the jobs' working memory (measured in one process on Gemma: a trace with 2 noise
            # samples +640 MB, a ROME edit +110 MB), which can reach one weights' size with a trace and an edit
            # at once; what the sessions hold after their jobs is what a second copy of the weights would show in
            "extra_memory_over_one_session_mb": round(self.rss_peak_mb - self.rss_base_mb),
            "held_over_one_session_mb": round(self.rss_end_mb - self.rss_base_mb),
            "one_copy_of_the_weights": self.rss_end_mb - self.rss_base_mb < self.weights_mb,
            "queue_waits_seen": self.queue_waits, "cancel_worked": self.cancelled, "wall_s": round(self.wall_s, 1),
        }

    def _busy(self, p: dict) -> bool:
        """Did two traces and an edit run during the whole of this prediction?"""
        def active(kind):
            return sum(1 for j in self.jobs if j["kind"] == kind and j["start"] <= p["start"] and
                       (j.get("end") or 1e18) >= p["end"])
        return active("trace") >= 2 and active("edit") >= 1


# --- the server -----------------------------------------------------------------------------------------------------
def run_async(coro):
    """asyncio.run(coro) on a thread of its own: the session's Chromium (Playwright's sync API, conftest.chromium)
    keeps an event loop running in the main thread once a browser test opened it, and asyncio.run refuses to
    start there ("cannot be called from a running event loop"), so a load test after a browser test failed."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def start_server(port: int, log_path: Path, limits: dict | None, ray: str | None = None,
                 env: dict | None = None) -> subprocess.Popen:
    """`streamlit run app.py`; with `ray` (EDITKIT_RAY: local:N, or a cluster's host:port) its page jobs that are
    work items run on Ray workers beside the server; `env`: more environment variables (settings)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false", **(env or {}))
    env.pop("EDITKIT_RAY", None)
    if limits:
        env["EDITKIT_LIMITS"] = json.dumps(limits)
    if ray:
        env["EDITKIT_RAY"] = ray
    cmd = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true", "--server.port", str(port),
           "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]  # as served to a class: no reloads when files change
    log = open(log_path, "wb")  # a file, not a pipe: a chatty server never blocks on a full pipe
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_server(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, OSError):
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB (Linux /proc)."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


class PeakMemory:
    """A server's peak resident memory (VmHWM), read every half second by a thread from start() until stop()."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.peak, self._stop = proc, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> "PeakMemory":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.is_set() and self.proc.poll() is None:
            try:
                self.peak = max(self.peak, memory_mb(self.proc.pid)[1])
            except OSError:
                break
            time.sleep(0.5)


def weights_mb() -> float:
    """The served model's float32 weights (its cached folder; the cache may also hold a bfloat16 copy)."""
    from editkit.model.loading import shipped_folder

    return sum(f.stat().st_size for f in shipped_folder("gemma-3-270m").glob("*.safetensors")) / 2 ** 20


async def page_idle(page, quiet: float, timeout_s: float, who: str, poll: float = 0.2) -> None:
    """Wait until a Streamlit page's script run is over: no running indicator for `quiet` seconds (polled every
    `poll` s); TimeoutError naming `who` after `timeout_s`."""
    end, since = time.time() + timeout_s, None
    while time.time() < end:
        running = await page.locator('[data-testid="stStatusWidget"]').count() > 0
        if running:
            since = None
        elif since is None:
            since = time.time()
        elif time.time() - since >= quiet:
            return
        await asyncio.sleep(poll)
    raise TimeoutError(f"{who}: the page was still running")


# --- one browser session ------------------------------------------------------------------------------------------
class Session:
    def __init__(self, report: Report, index: int, role: str, page, timeout_s: float):
        self.r, self.i, self.role, self.page, self.timeout = report, index, role, page, timeout_s * 1000
        self.name = f"{role}{index}"

    async def idle(self, quiet: float = 1.0, timeout: float | None = None) -> None:
        """Until the script run is over (no running indicator for `quiet` seconds)."""
        await page_idle(self.page, quiet, timeout or self.timeout / 1000, self.name)

    async def check_errors(self, what: str) -> None:
        boxes = self.page.locator(ERRORS)
        for k in range(await boxes.count()):
            self.r.errors.append(f"{self.name} {what}: {(await boxes.nth(k).inner_text())[:300]}")

    async def goto(self, title: str) -> None:
        """Another page through the sidebar navigation (the session and its edits stay)."""
        await self.page.locator('[data-testid="stSidebarNav"] a', has_text=title).first.click()
        await self.page.get_by_role("heading", name=title if title != "Home" else "editkit").first.wait_for(
            timeout=self.timeout)
        await self.idle()

    async def predict(self, prompt: str, timed: bool = True) -> str:
        """Type a prompt on the home page; the "token (p = ...)" text of its prediction line."""
        box = self.page.get_by_label("Prompt")
        if await box.input_value() == prompt:
            await self.predict(FILLER, timed=False)
        await box.fill(prompt)
        start = time.time()
        await box.press("Enter")
        line = self.page.locator('[data-testid="stMarkdownContainer"]', has_text=f"Prediction for “{prompt}”")
        await line.first.wait_for(timeout=self.timeout)
        end = time.time()
        text = await line.first.inner_text()
        if timed:
            self.r.predictions.append({"start": start, "end": end, "seconds": end - start, "prompt": prompt,
                                       "session": self.name})
        await self.check_errors(f"prediction {prompt!r}")
        m = LINE.search(text)
        if not m:
            raise AssertionError(f"{self.name}: unreadable prediction line {text!r}")
        return f"{m.group(1)} (p = {m.group(2)})"

    async def trace(self, prompt: str, subject: str, samples: int = 2) -> tuple[str, float]:
        page = self.page
        await page.get_by_label("Prompt", exact=True).fill(prompt)
        await page.get_by_label("Subject (a substring of the prompt; guessed if empty)").fill(subject)
        await page.get_by_label("Noise samples n").fill(str(samples))
        for kind in ("mlp", "attn"):  # the hidden-state panel (and the severing chart) only
            remove = page.get_by_role("button", name=f"Remove {kind}")
            if await remove.count():
                await remove.click()
        answer = page.locator('[data-testid="stMarkdownContainer"]', has_text="clean p =")
        await self._job("trace", "Trace", answer.first)
        await self.idle()
        await self.check_errors("trace")
        m = ANSWER.search(await answer.first.inner_text())
        return m.group(1), float(m.group(2))

    async def _watch_queue(self) -> None:
        """Runs beside a job until it is cancelled: counts the job if its queue position ("waiting for a turn
        (... ahead of yours)") was ever shown."""
        while True:
            if await self.page.get_by_text("ahead of yours").count():
                self.r.queue_waits += 1
                return
            await asyncio.sleep(0.3)

    async def _job(self, kind: str, button: str, done):
        """Click `button`, wait for the `done` locator; the job's span is recorded and its queue wait noted."""
        job = {"kind": kind, "session": self.name, "start": time.time()}
        self.r.jobs.append(job)
        watch = asyncio.create_task(self._watch_queue())
        try:
            await self.page.get_by_role("button", name=button, exact=True).click()
            await done.wait_for(timeout=self.timeout)
        finally:
            watch.cancel()
        job["end"] = time.time()

    async def edit_and_keep(self, template: str, subject: str, new: str) -> None:
        page = self.page
        await page.get_by_label("Prompt with {} for the subject").fill(template)
        await page.get_by_label("Subject", exact=True).fill(subject)
        await page.get_by_label("New target").fill(new)
        await page.get_by_label("True target (optional)").fill("")
        from editkit.editing.methods import all_methods
        from editkit.editing.requests import NEIGHBOURS_LABEL

        for label in ("Paraphrase prompts (one per line)", NEIGHBOURS_LABEL + " (one per line)", "Generation prompts"):
            await page.get_by_label(label, exact=True).fill("")
        for method in [m.label for m in all_methods() if m.name != "rome"]:  # ROME only; .first: the request's
            await page.get_by_role("button", name=f"Remove {method}").first.click()  # multiselect, not lifelong's
            await self.idle(quiet=0.5)
        await page.get_by_label("Generations per request").fill("0")
        await page.get_by_label("Generations per request").press("Tab")
        await self.idle(quiet=0.5)
        keep = page.get_by_role("button", name="Keep the ROME edit")
        await self._job("edit", "Edit and compare", keep)
        await self.idle()
        await self.check_errors("edit")
        await keep.click()
        await page.get_by_text("Your edits (1)").first.wait_for(timeout=self.timeout)
        await self.idle()


# --- the scenario --------------------------------------------------------------------------------------------
async def _run(url: str, n: int, report: Report, pid: int, timeout_s: float, cancel: bool) -> None:
    from playwright.async_api import async_playwright

    roles = report.roles
    editors = [i for i, r in enumerate(roles) if r == "editor"]
    facts = {i: FACTS[k % len(FACTS)] for k, i in enumerate(editors)}  # each editor's own fact
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium_path(), headless=True,
                                          args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        sessions = []
        for i, role in enumerate(roles):
            ctx = await browser.new_context(viewport={"width": 1300, "height": 900})
            page = await ctx.new_page()
            page.set_default_timeout(timeout_s * 1000)
            sessions.append(Session(report, i, role, page, timeout_s))
        # every session opens the home page; the model loads once
        first = sessions[0]
        await first.page.goto(url)
        await first.page.get_by_label("Prompt").wait_for(timeout=timeout_s * 1000)
        await first.idle()
        report.rss_base_mb = memory_mb(pid)[0]
        await asyncio.gather(*(s.page.goto(url) for s in sessions[1:]))
        await asyncio.gather(*(s.idle() for s in sessions[1:]))
        # the base model's answers, read once through the app
        base = {}
        for prompt, *_ in FACTS:
            base[prompt] = await first.predict(prompt, timed=False)
        prompts = list(base)
        done = asyncio.Event()

        def compare(s: Session, prompt: str, got: str) -> None:
            if got != base[prompt]:
                report.leaks.append(f"{s.name} saw {got!r} for {prompt!r}; the base model says {base[prompt]!r}")
            else:
                report.checks += 1

        async def predictor(s: Session) -> None:
            k = s.i
            while not done.is_set():
                prompt = prompts[k % len(prompts)]
                compare(s, prompt, await s.predict(prompt))
                k += 1

        async def tracer(s: Session, k: int) -> None:
            await s.goto("Causal tracing")
            prompt, _, subject, _ = FACTS[k % len(FACTS)]  # the facts the editors are changing
            token, p = await s.trace(prompt, subject)
            want = LINE.search("most likely next token " + base[prompt])
            if token != want.group(1) or abs(p - float(want.group(2))) > 6e-4:  # 3 vs 4 decimals on the page
                report.leaks.append(f"{s.name} traced {prompt!r}: answer {token} p={p}; base {base[prompt]}")
            else:
                report.checks += 1
            if cancel and k == 1:
                report.cancelled = await cancel_a_trace(s, prompt, subject)

        async def editor(s: Session) -> None:
            prompt, template, subject, new = facts[s.i]
            await s.goto("Edit & compare")
            await s.edit_and_keep(template, subject, new)
            await s.goto("Home")
            own = await s.predict(prompt)
            if not own.startswith(repr(" " + new)):
                report.leaks.append(f"{s.name} does not see its own edit: {prompt!r} -> {own}")
            else:
                report.checks += 1
            # its own edit may move other prompts a little (specificity), so here the check is that another
            # editor's edit is not visible: the base model's top token, never the other editor's new target
            for other in prompts:
                if other == prompt:
                    continue
                got = await s.predict(other)
                targets = [repr(" " + f[3]) for i, f in facts.items() if f[0] == other and i != s.i]
                if not got.startswith(base[other].split(" (p")[0]) or any(got.startswith(t) for t in targets):
                    report.leaks.append(f"{s.name} saw {got!r} for {other!r}; the base model says {base[other]!r}")
                else:
                    report.checks += 1

        async def shot_on_error(s: Session, coro):
            """A failing role leaves a screenshot of its page (the report names it)."""
            try:
                return await coro
            except BaseException:
                path = Path(tempfile.gettempdir()) / f"editkit-load-{s.name}.png"
                try:
                    await s.page.screenshot(path=str(path), full_page=True)
                    report.errors.append(f"{s.name}: screenshot {path}")
                except Exception:  # noqa: BLE001
                    pass
                raise

        start = time.time()
        tracers = [s for s in sessions if s.role == "tracer"]
        long_jobs = [shot_on_error(s, tracer(s, k)) for k, s in enumerate(tracers)] + \
            [shot_on_error(s, editor(s)) for s in sessions if s.role == "editor"]

        async def long_then_stop():
            try:
                results = await asyncio.gather(*long_jobs, return_exceptions=True)
                for res in results:
                    if isinstance(res, BaseException):
                        report.errors.append(f"{type(res).__name__}: {str(res)[:300]}")
            finally:
                done.set()

        results = await asyncio.gather(long_then_stop(), *(predictor(s) for s in sessions if s.role == "predictor"),
                                       return_exceptions=True)
        for res in results:
            if isinstance(res, BaseException):
                report.errors.append(f"{type(res).__name__}: {str(res)[:300]}")
        report.wall_s = time.time() - start
        report.rss_end_mb = memory_mb(pid)[0]
        await browser.close()


async def cancel_a_trace(s: Session, prompt: str, subject: str) -> bool:
    """Start a long trace and press Cancel after 2 s: the page says it was cancelled, with no error."""
    page = s.page
    await page.get_by_label("Noise samples n").fill("40")
    await page.get_by_role("button", name="Trace", exact=True).click()
    await page.get_by_role("button", name="Cancel").wait_for(timeout=s.timeout)
    await asyncio.sleep(2)
    await page.get_by_role("button", name="Cancel").click()
    try:
        await page.get_by_text(re.compile("was cancelled|Trace cancelled")).first.wait_for(timeout=60_000)
    except Exception:  # noqa: BLE001
        return False
    await s.idle()
    await s.check_errors("cancel")
    return True


def roles_for(n: int) -> list[str]:
    """tracer, editor, predictor, tracer, editor, predictor, ... (6 sessions: two of each)."""
    cycle = ["tracer", "editor", "predictor"]
    return [cycle[i % len(cycle)] for i in range(n)]


def run(sessions: int = 6, timeout_s: float = 600, limits: dict | None = None, cancel: bool | None = None,
        ray: str | None = None) -> dict:
    """Start the server (its jobs on Ray with `ray`), run the scenario with `sessions` browser sessions, stop the
    server; the report."""
    if chromium_path() is None:
        raise RuntimeError("no chromium installed (apt-get install -y chromium)")
    report = Report(sessions, roles_for(sessions))
    report.weights_mb = weights_mb()
    port = free_port()
    log = Path(tempfile.gettempdir()) / f"editkit-load-{port}.log"
    proc = start_server(port, log, limits, ray)
    watcher = PeakMemory(proc)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url, proc, timeout=240)
        watcher.start()
        run_async(_run(url, sessions, report, proc.pid, timeout_s, sessions >= 6 if cancel is None else cancel))
        report.rss_peak_mb = max(watcher.peak, memory_mb(proc.pid)[1])
    finally:
        watcher.stop()
        stop_server(proc)
    text = log.read_text(errors="replace")
    for m in re.finditer(r"(Traceback \(most recent call last\)|unexpected error[^\n]*)", text):
        report.errors.append(f"server log: {text[m.start():m.start() + 300]}")
    out = report.summary()
    out["server_log"] = str(log)
    out["ray"] = ray
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=600, help="seconds any one step may take")
    ap.add_argument("--jobs", type=int, default=3, help="long jobs computing at once (EDITKIT_LIMITS jobs)")
    ap.add_argument("--no-cancel", action="store_true", help="skip the cancelled-trace step")
    ap.add_argument("--ray", default=None, metavar="ADDRESS|local:N",
                    help="run the app's work-item jobs on Ray (EDITKIT_RAY), e.g. local:2 beside the server")
    args = ap.parse_args(argv)
    out = run(args.sessions, args.timeout, {"jobs": args.jobs}, cancel=not args.no_cancel, ray=args.ray)
    print(json.dumps(out, indent=1))
    return 0 if out["errors"] == 0 and out["leaks"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
