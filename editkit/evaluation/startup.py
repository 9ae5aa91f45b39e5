"""`editkit bench startup`: how long editkit takes to answer from a fresh process on a warm machine (the model
converted, its files in the page cache), where that time goes, and the same for an earlier commit in the same
run.

Measured in fresh processes, each the best and the median of `runs` after one warm-up:
- help: `python -m editkit --help`;
- predict: `python -m editkit predict --model M "<prompt>" --top 3`;
- load: `python -c "import editkit; editkit.load(M)"` (a notebook's first cell; a converted model is loaded at
  its first use, so this is the time until the notebook's next cell can run);
- first-use: the same and then `editkit.logit_lens(lm, "<prompt>", 3)` (the first call that needs the model
  itself: what the deferred load costs when it comes);
- app: `streamlit run app.py` until its home page has rendered in headless Chromium: the embedded model picked
  and its prediction drawn (the app's default model, whatever M is; skipped without Playwright or Chromium).
  Each also by phase: the same command run by a probe (PROBE) that, for predict, builds the parser ("parser"),
  then runs the command with editkit's phases recorded (core/timing.py: "config", "tokenizer", "weights",
  "check" = the first forward; "forward" = the light forward of model/quick.py); "answer" (predict) or "rest"
  is the remainder (imports, a forward through transformers, printing), "python" the interpreter's start
  and exit (the process's wall time less the probe's own). The app's phases: "server" (until Streamlit
  answers), "page" (until the title is drawn), "model and prediction" (until the prediction and its logit lens
  are drawn).

`reference` (a git commit) runs the same commands on that commit's code (`git archive` into a temporary
folder, PYTHONPATH there) interleaved with the current code's, on the same model cache: a before and after in
one run. Code without the phase recording (before it existed) gives its load as one phase, "load".
"""
from __future__ import annotations

import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import EditkitError
from ..core.paths import ROOT
from ..core.results import JsonObject, Result, frame

PROMPT = "The Colosseum is located in the city of"
# seconds, best of the runs: a warm answer a person does not wait for
GOALS = {"help": 0.5, "predict": 3.0, "load": 3.0}
MEASUREMENTS = ("help", "predict", "load", "first-use", "app")
PROBE = r"""
import time
def clock():
    return time.perf_counter(), time.process_time()
T0 = clock()
import contextlib, io, json, sys
from pathlib import Path
mode, model, prompt, root = sys.argv[1:5]
phases = []
def lap(name, since):
    now = clock()
    phases.append([name, now[0] - since[0], now[1] - since[1]])
    return now
t = clock()
import editkit
assert Path(editkit.__file__).resolve().is_relative_to(Path(root).resolve()), editkit.__file__
t = lap("import editkit", t)
try:
    from editkit.core.timing import recording
except ImportError:
    recording = lambda: contextlib.nullcontext([])
if mode == "predict":
    from editkit.cli import build_parser
    args = build_parser().parse_args(["predict", "--model", model, prompt, "--top", "3"])
    t = lap("parser", t)
    quiet = io.StringIO()
    with recording() as inside, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        args.show(args.func(args))
else:
    with recording() as inside:
        lm = editkit.load(model)
        if mode == "first-use":
            editkit.logit_lens(lm, prompt, 3)
inside = [list(p) + [None] * (3 - len(p)) for p in inside]  # (name, wall, CPU) of the load's own steps
end = clock()
rest = [end[i] - t[i] - sum(p[i + 1] or 0.0 for p in inside) for i in (0, 1)]
if inside:
    last = "answer" if mode == "predict" else "rest"
else:
    last = "load and answer" if mode == "predict" else "load"
phases += inside + [[last, *rest]]
print(json.dumps({"phases": phases, "total": end[0] - T0[0], "cpu": end[1] - T0[1]}))
"""


@dataclass(frozen=True)
class StartupSpec:
    """What `bench startup` measures: `model` (warm: converted before the run), `runs` per measurement after
    one warm-up, the measurements (MEASUREMENTS), and an earlier commit to measure beside the current code."""

    model: str = "gemma-3-270m"
    runs: int = 3
    measurements: tuple[str, ...] = MEASUREMENTS
    reference: str | None = None
    prompt: str = PROMPT
    port: int | None = None  # the app's port (default: a free one)


@dataclass
class StartupBench(Result):
    """Per code (the current one, and the reference commit when asked): per measurement its command, every
    run's seconds, the best and the median, and the median of each phase over the probe's runs."""

    model: str
    machine: dict
    spec: dict
    codes: dict[str, dict] = field(default_factory=dict)  # label -> {"root", "commit", measurement -> row}
    load_average_end: list = field(default_factory=list)
    _show = "table"

    def to_json(self) -> JsonObject:
        return {"model": self.model, "machine": self.machine, "spec": self.spec, "codes": self.codes,
                "load_average_end": self.load_average_end, "goals": self.goals()}

    @classmethod
    def _from_json(cls, d: dict):
        return cls(d["model"], d["machine"], d["spec"], d["codes"], d.get("load_average_end", []))

    def goals(self) -> dict:
        """measurement -> {"goal", "best", "met"} of the current code."""
        current = self.codes.get("current", {})
        return {m: {"goal": g, "best": current[m]["best"], "met": current[m]["best"] < g}
                for m, g in GOALS.items() if current.get(m, {}).get("best") is not None}

    def to_frame(self):
        """One row per code, measurement and phase (phase "total": the best of the plain command's runs)."""
        rows = []
        for label, code in self.codes.items():
            for m in MEASUREMENTS:
                row = code.get(m)
                if not row or row.get("best") is None:
                    continue
                rows.append({"code": label, "measurement": m, "phase": "total", "seconds": row["best"]})
                rows += [{"code": label, "measurement": m, "phase": p, "seconds": s}
                         for p, s in row.get("phases", {}).items()]
        return frame(rows, ["code", "measurement", "phase", "seconds"])


def bench_startup(spec: StartupSpec = StartupSpec(), say=print) -> StartupBench:
    """Every measurement of `spec`, the codes interleaved run by run (module docstring)."""
    from .bench_report import machine

    if spec.runs < 1:
        raise EditkitError("--runs must be at least 1")
    unknown = set(spec.measurements) - set(MEASUREMENTS)
    if unknown:
        raise EditkitError(f"unknown measurement(s) {', '.join(sorted(unknown))}; choose from "
                           f"{', '.join(MEASUREMENTS)}")
    out = StartupBench(spec.model, machine(), {**spec.__dict__, "measurements": list(spec.measurements)})
    with _codes(spec.reference) as roots:
        for label, root in roots.items():
            out.codes[label] = {"root": str(root), "commit": _commit(None if label == "current" else label)}
        for m in spec.measurements:
            rows = _measure(m, roots, spec, say)
            for label, row in rows.items():
                out.codes[label][m] = row
    out.load_average_end = [round(x, 2) for x in os.getloadavg()]
    return out


def _measure(m: str, roots: dict[str, Path], spec: StartupSpec, say) -> dict[str, dict]:
    """One measurement for every code: a warm-up each, then `runs` rounds over the codes in turn."""
    if m == "app":
        return _app(roots, spec, say)
    rows = {label: {"command": _shown(m, spec), "seconds": [], "cpu": [], "probes": []} for label in roots}
    for round_ in range(spec.runs + 1):
        for label, root in roots.items():
            seconds, cpu = _timed(_command(m, spec), root)
            probe = _probe(m, spec, root) if m != "help" else None
            if round_ == 0:
                continue  # the warm-up: bytecode compiled, the files in the page cache
            rows[label]["seconds"].append(round(seconds, 3))
            rows[label]["cpu"].append(round(cpu, 3))
            if probe is not None:
                rows[label]["probes"].append(probe)
            say(f"startup {m} [{label}] run {round_}: {seconds:.2f} s ({cpu:.2f} CPU s)")
    return {label: _summary(row) for label, row in rows.items()}


def _summary(row: dict) -> dict:
    """The runs' best and median wall seconds (and CPU seconds: steadier on a busy machine), and the median
    wall and CPU seconds of each phase."""
    seconds, probes = row.pop("seconds"), row.pop("probes")
    row.update(seconds=seconds, best=min(seconds), median=round(statistics.median(seconds), 3))
    if row.get("cpu"):
        row.update(cpu_best=min(row["cpu"]), cpu_median=round(statistics.median(row["cpu"]), 3))
    for kind, key in (("wall", "phases"), ("cpu", "cpu_phases")):
        names = list(dict.fromkeys(name for probe in probes for name in probe[kind]))
        if names:
            row[key] = {n: round(statistics.median(p[kind].get(n, 0.0) for p in probes), 3) for n in names}
    return row


def _command(m: str, spec: StartupSpec) -> list[str]:
    python = [sys.executable]
    if m == "help":
        return python + ["-m", "editkit", "--help"]
    if m == "predict":
        return python + ["-m", "editkit", "predict", "--model", spec.model, spec.prompt, "--top", "3"]
    if m == "load":
        return python + ["-c", f"import editkit; editkit.load({spec.model!r})"]
    first_use = f"import editkit; editkit.logit_lens(editkit.load({spec.model!r}), {spec.prompt!r}, 3)"
    return python + ["-c", first_use]


def _shown(m: str, spec: StartupSpec) -> str:
    return {"help": "python -m editkit --help",
            "predict": f'python -m editkit predict --model {spec.model} "{spec.prompt}" --top 3',
            "load": f'python -c "import editkit; editkit.load(\'{spec.model}\')"',
            "first-use": f'python -c "import editkit; editkit.logit_lens(editkit.load(\'{spec.model}\'), '
                         '...)"'}[m]


def _env(root: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(root), HF_HUB_OFFLINE="1",
                STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")


def _timed(cmd: list[str], root: Path) -> tuple[float, float]:
    """The command's wall seconds and the CPU seconds (user + system) its process used."""
    before, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(cmd, cwd=root, env=_env(root), capture_output=True, text=True, timeout=600,
                          check=False)
    seconds, cpu = time.perf_counter() - start, _children_cpu() - before
    if done.returncode != 0:
        raise EditkitError(f"{' '.join(cmd[1:])[:120]} failed in {root}: {_tail(done.stderr)}")
    return seconds, cpu


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _probe(m: str, spec: StartupSpec, root: Path) -> dict[str, dict[str, float]]:
    """The wall and CPU seconds of each phase of one probe run (module docstring), "python" included."""
    before, start = _children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROBE, m, spec.model, spec.prompt, str(root)], cwd=root,
                          env=_env(root), capture_output=True, text=True, timeout=600, check=False)
    wall, cpu = time.perf_counter() - start, _children_cpu() - before
    if done.returncode != 0:
        raise EditkitError(f"the start-up probe ({m}) failed in {root}: {_tail(done.stderr)}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    phases: dict[str, dict[str, float]] = {"wall": {"python": wall - out["total"]},
                                           "cpu": {"python": cpu - out["cpu"]}}
    for name, seconds, cpu_seconds in out["phases"]:
        phases["wall"][name] = phases["wall"].get(name, 0.0) + seconds
        if cpu_seconds is not None:
            phases["cpu"][name] = phases["cpu"].get(name, 0.0) + cpu_seconds
    return phases


def _tail(text: str) -> str:
    lines = [l for l in (text or "").strip().splitlines() if l.strip()]
    return lines[-1][:300] if lines else "no message"


@contextmanager
def _codes(reference: str | None):
    """{"current": this checkout, reference: a temporary export of that commit} (a checkout is needed for
    both)."""
    if not (ROOT / "editkit" / "__init__.py").exists():
        raise EditkitError("bench startup runs from a checkout of editkit (or an editable install)")
    if reference is None:
        yield {"current": ROOT}
        return
    done = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", reference], capture_output=True,
                          timeout=120, check=False)
    if done.returncode != 0:
        raise EditkitError(f"--reference {reference}: {_tail(done.stderr.decode(errors='replace'))}")
    tmp = Path(tempfile.mkdtemp(prefix="editkit-reference-"))
    try:
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        yield {"current": ROOT, reference: tmp}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _commit(reference: str | None) -> str | None:
    """The commit measured: the reference's, or the checkout's HEAD ("+changes" when files differ from it)."""
    git = ["git", "-C", str(ROOT)]
    try:
        sha = subprocess.run([*git, "rev-parse", "--short", reference or "HEAD"], capture_output=True,
                             text=True, timeout=30, check=True).stdout.strip()
        dirty = reference is None and subprocess.run([*git, "status", "--porcelain", "-uno"],
                                                     capture_output=True, text=True, timeout=30,
                                                     check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+changes" if dirty else "")


def _app(roots: dict[str, Path], spec: StartupSpec, say) -> dict[str, dict]:
    """The app's first page per code: `streamlit run app.py` until the home page has rendered in Chromium."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {label: {"skipped": "Playwright is not installed (pip install -r requirements.txt)"}
                for label in roots}
    exe = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if exe is None:
        return {label: {"skipped": "no Chromium on this machine"} for label in roots}
    command = "streamlit run app.py, until the home page's prediction is drawn"
    rows = {label: {"command": command, "seconds": [], "cpu": [], "probes": []} for label in roots}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        try:
            for round_ in range(spec.runs + 1):
                for label, root in roots.items():
                    before = _children_cpu()
                    phases = _app_once(root, browser, spec.port or _free_port())
                    if round_:
                        rows[label]["seconds"].append(round(sum(phases.values()), 3))
                        rows[label]["cpu"].append(round(_children_cpu() - before, 3))  # the server's
                        rows[label]["probes"].append({"wall": phases, "cpu": {}})
                        say(f"startup app [{label}] run {round_}: {sum(phases.values()):.2f} s")
        finally:
            browser.close()
    return {label: _summary(row) for label, row in rows.items()}


def _app_once(root: Path, browser, port: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port",
           str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"]
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=root, env=_env(root), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        page = None
        try:
            _wait_health(url, proc, log)
            served = time.perf_counter()
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            page.get_by_role("heading", name="editkit").first.wait_for(timeout=300_000)
            drawn = time.perf_counter()
            page.get_by_text("Prediction for").first.wait_for(timeout=600_000)
            page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
            done = time.perf_counter()
        finally:
            if page is not None:
                page.close()
            _stop(proc)
    return {"server": served - start, "page": drawn - served, "model and prediction": done - drawn}


def _wait_health(url: str, proc: subprocess.Popen, log, timeout: float = 300) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            log.seek(0)
            why = _tail(log.read().decode(errors="replace"))
            raise EditkitError(f"streamlit exited with {proc.returncode}: {why}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise EditkitError(f"streamlit did not answer at {url} within {timeout:.0f} s")


def _stop(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
