"""A class on the expert pages: `streamlit run app.py` on the embedded Gemma 3 270M and N students at once, each a
websocket session speaking the browser's protocol (tests/ws_util.py; a class's pages render on the students' own
machines, so the driver costs this machine little). It extends the load driver (tests/load_util.py: the server,
its memory) from six sessions to a class.

Every student, after a reading pause (uniform in [0, 2 x think] seconds) before each action, for `rounds` rounds:
predicts on the home page the two facts the class shares (the line must read exactly as the base model's unless it
is the student's own edited fact) and a known fact of its own (ROME's known facts, a different one per student and
round: a prompt nobody else asked, computed rather than served from the page's cache), opens Causal tracing,
inspects the FFN memories at the last token, opens Edit & compare and Attention vs FFN, and goes home. Each of
these is timed from the request to the end of its page run: they are the actions that never queue (goal: p95
under 1 s). The first `own` students also "try their own" in their first round: a causal trace of their fact (2
noise samples, three panels and severing) and a ROME edit that they keep, both jobs in the server's queue; a
job that waits must show its place ("ahead of yours") and every job must finish. After the edit, a student's
own fact must predict its new target and the other fact the base model's top token (no other student's edit is
visible: 0 leaks).

Memory: the server's resident set after the model loaded (the weights, torch and Streamlit) and its peak (VmHWM)
during the class, against that base plus the jobs' memory budget the Server box reports (set it with
EDITKIT_MEMORY_BUDGET, --budget).

    python benchmarks/load/class_load.py --students 30 --own 8 --think 5 --budget "4 GB"   # the full form
    python -m pytest -q tests/test_class_load.py --full            # the small form (CI)
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # the load helpers the tests share
from browser_util import free_port, wait_http  # noqa: E402
from load_util import PeakMemory, memory_mb, run_async, start_server, stop_server, weights_mb  # noqa: E402
from ws_util import WsSession  # noqa: E402

FACTS = [  # (prompt, request template, subject, new target, true target): ROME flips both on Gemma 3 270M
    ("The Eiffel Tower is located in the city of", "{} is located in the city of", "The Eiffel Tower", "Rome",
     "Paris"),
    ("The mother tongue of Danielle Darrieux is", "The mother tongue of {} is", "Danielle Darrieux", "English",
     "French"),
]
LINE = re.compile(r"Prediction for “(.+?)”: most likely next token \*\*(.+?)\*\* \(p = ([0-9.]+)\)")
ANSWER = re.compile(r"Answer \*\*(.+?)\*\*: clean p = ([0-9.]+)")
PAGES = ("causal_tracing", "ffn_memories", "edit_compare", "attention_vs_ffn")


def _own_prompts() -> list[str]:
    from editkit.data.facts import known_facts

    return [f["prompt"] for f in known_facts()[:1000:3]]


OWN_PROMPTS = _own_prompts()


class Student:
    def __init__(self, i: int, url: str, report: dict, think: float, rounds: int, own: bool, timeout: float):
        self.i, self.url, self.r, self.think, self.rounds, self.own = i, url, report, think, rounds, own
        self.rng, self.timeout = random.Random(i), timeout
        self.fact = FACTS[i % len(FACTS)]
        self.edited = False
        self.s: WsSession | None = None

    async def pause(self) -> None:
        if self.think > 0:
            await asyncio.sleep(self.rng.uniform(0, 2 * self.think))

    async def act(self, what: str, page: str | None = None, **kwargs) -> float:
        """A timed action that never queues: a page run from its request to its end."""
        await self.pause()
        start = time.time()
        seconds = await self.s.run(page, **kwargs)
        self.r["actions"].append({"student": self.i, "what": what, "start": start, "seconds": seconds})
        self.check(what)
        return seconds

    def check(self, what: str) -> None:
        for e in self.s.errors():
            self.r["errors"].append(f"student {self.i} {what}: {e[:300]}")

    async def predict(self, prompt: str) -> None:
        if self.s.page != "":
            await self.act("open home", "")
        await self.act("predict", home_prompt=prompt)
        got = next((m for t in self.s.texts() if (m := LINE.search(t)) and m.group(1) == prompt), None)
        if got is None:
            self.r["errors"].append(f"student {self.i}: no prediction line for {prompt!r}")
            return
        token = got.group(2)
        own = self.edited and prompt == self.fact[0]
        if own:
            ok = token == repr(" " + self.fact[3])
        elif self.edited:  # its own edit may move other prompts a little: the top token must stay the base one
            ok = token == self.r["base"][prompt][0]
        else:
            ok = (token, got.group(3)) == self.r["base"][prompt]
        if ok:
            self.r["checks"] += 1
        else:
            self.r["leaks"].append(f"student {self.i} (edited: {self.edited}) saw {token} p={got.group(3)} for "
                                   f"{prompt!r}; base {self.r['base'][prompt]}")

    async def job(self, kind: str, page: str, press: str, done, **values) -> None:
        """A queued job: its span, whether it showed its place while waiting, whether it finished."""
        await self.pause()
        if self.s.page != page:
            await self.act(f"open {page}", page)
        job = {"student": self.i, "kind": kind, "start": time.time(), "place_shown": False, "finished": False}
        self.r["jobs"].append(job)

        def watch(s) -> bool:
            job["place_shown"] = job["place_shown"] or s.has("ahead of yours")
            return False

        await self.s.run(press=press, until=watch, **values)
        job["end"], job["seconds"] = time.time(), time.time() - job["start"]
        job["finished"] = done(self.s)
        self.check(kind)

    async def try_own(self) -> None:
        prompt, template, subject, new, true = self.fact
        await self.job("trace", "causal_tracing", "FormSubmitter:trace_form-Trace",
                       lambda s: any(ANSWER.search(t) for t in s.texts()),
                       trace_prompt=prompt, trace_subject=subject, trace_samples=2)
        answer = next((m for t in self.s.texts() if (m := ANSWER.search(t))), None)
        base_token = self.r["base"][prompt][0]
        if answer is None or answer.group(1) != base_token:
            self.r["leaks"].append(f"student {self.i} traced {prompt!r}: {answer and answer.group(0)}; base "
                                   f"{base_token}")
        await self.act("open edit_compare", "edit_compare")
        await self.act("pick ROME", ec_methods=["ROME"], ec_ngen=0, ec_prompt=template, ec_subject=subject,
                       ec_new=new, ec_true=true, ec_para="", ec_neigh="", ec_gen="")
        await self.job("edit", "edit_compare", "ec_run", lambda s: "keep_rome" in s.widgets)
        if "keep_rome" in self.s.widgets:
            await self.act("keep the edit", press="keep_rome")
            self.edited = True

    async def lesson_round(self, k: int) -> None:
        for prompt, *_ in FACTS if self.rng.random() < 0.5 else FACTS[::-1]:
            await self.predict(prompt)
        await self.act("predict", home_prompt=OWN_PROMPTS[(self.i + k * 97) % len(OWN_PROMPTS)])
        await self.act("open causal_tracing", "causal_tracing")
        await self.act("open ffn_memories", "ffn_memories")
        await self.act("inspect memories", press="FormSubmitter:mem_form-Inspect")
        await self.act("open edit_compare", "edit_compare")
        await self.act("open attention_vs_ffn", "attention_vs_ffn")

    async def walk(self) -> None:
        async with WsSession(self.url, timeout=self.timeout) as s:
            self.s = s
            await self.act("open home", "")
            for k in range(self.rounds):
                if k == 0 and self.own:
                    await self.try_own()
                await self.lesson_round(k)
            await self.predict(self.fact[0])


async def _base(url: str, report: dict) -> None:
    """The model loads (once), the base model's answers are read through the app, and the budget is read from
    the Server box."""
    async with WsSession(url, timeout=600) as s:
        await s.run("")
        for prompt, *_ in FACTS:
            await s.run(home_prompt=prompt)
            m = next(m for t in s.texts() if (m := LINE.search(t)) and m.group(1) == prompt)
            report["base"][prompt] = (m.group(2), m.group(3))
        line = next(t for t in s.texts() if "of working memory" in t)
        report["budget_gb"] = _gb(re.search(r"within ([0-9.]+ [GM]B) of working memory", line).group(1))


def _gb(text: str) -> float:
    value, unit = text.split()
    return float(value) / (1000 if unit == "MB" else 1)


async def _class(url: str, report: dict, n: int, own: int, think: float, rounds: int, timeout: float) -> None:
    students = [Student(i, url, report, think, rounds, i < own, timeout) for i in range(n)]

    async def guarded(st: Student):
        try:
            await st.walk()
        except Exception as exc:  # noqa: BLE001 - reported
            report["errors"].append(f"student {st.i}: {type(exc).__name__}: {str(exc)[:300]}")

    start = time.time()
    await asyncio.gather(*(guarded(s) for s in students))
    report["wall_s"] = round(time.time() - start, 1)


def pct(xs, q):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else None


def summary(report: dict) -> dict:
    acts = report["actions"]
    by = {}
    for a in acts:
        by.setdefault(a["what"], []).append(a["seconds"])
    jobs = report["jobs"]
    waited = [j for j in jobs if j["place_shown"]]
    return {
        "students": report["students"], "own": report["own"], "think_s": report["think_s"],
        "rounds": report["rounds"], "actions": len(acts), "errors": len(report["errors"]),
        "error_list": report["errors"][:20], "leaks": len(report["leaks"]), "leak_list": report["leaks"][:20],
        "checks_passed": report["checks"],
        "p50_s": pct([a["seconds"] for a in acts], 0.5), "p95_s": pct([a["seconds"] for a in acts], 0.95),
        "max_s": pct([a["seconds"] for a in acts], 1.0),
        "p95_by_action_s": {k: pct(v, 0.95) for k, v in sorted(by.items())},
        "jobs": len(jobs), "jobs_finished": sum(j["finished"] for j in jobs), "jobs_waited_showing_place":
            len(waited), "job_p50_s": pct([j["seconds"] for j in jobs if "seconds" in j], 0.5),
        "job_max_s": pct([j["seconds"] for j in jobs if "seconds" in j], 1.0),
        "server_rss_after_model_mb": report["rss_base_mb"], "server_rss_peak_mb": report["rss_peak_mb"],
        "weights_mb": round(report["weights_mb"]), "budget_mb": round(report["budget_gb"] * 1000),
        "peak_over_base_mb": report["rss_peak_mb"] - report["rss_base_mb"],
        "peak_under_base_plus_budget": report["rss_peak_mb"] - report["rss_base_mb"] <= report["budget_gb"] * 1000,
        "wall_s": report["wall_s"], "load_average_before": report["load_before"],
        "load_average_after": report["load_after"],
    }


def run(students: int = 30, own: int = 8, think: float = 3.0, rounds: int = 2, budget: str | None = None,
        jobs: int | None = None, timeout: float = 1800, save: str | None = None) -> dict:
    import os

    report = {"students": students, "own": own, "think_s": think, "rounds": rounds, "errors": [], "leaks": [],
              "actions": [], "jobs": [], "checks": 0, "base": {}, "weights_mb": weights_mb(),
              "load_before": os.getloadavg()}
    env = {"EDITKIT_MEMORY_BUDGET": budget} if budget else {}
    port = free_port()
    log = Path(tempfile.gettempdir()) / f"editkit-class-{port}.log"
    proc = start_server(port, log, {"jobs": jobs} if jobs else None, env=env)
    watcher = PeakMemory(proc)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url, proc, timeout=240)
        run_async(_base(url, report))
        report["rss_base_mb"] = round(memory_mb(proc.pid)[0])
        watcher.start()
        run_async(_class(url, report, students, own, think, rounds, timeout))
        report["rss_peak_mb"] = round(max(watcher.peak, memory_mb(proc.pid)[1]))
    finally:
        watcher.stop()
        stop_server(proc)
    report["load_after"] = os.getloadavg()
    text = log.read_text(errors="replace")
    for m in re.finditer(r"(Traceback \(most recent call last\)|unexpected error[^\n]*)", text):
        report["errors"].append(f"server log: {text[m.start():m.start() + 300]}")
    out = summary(report)
    out["server_log"] = str(log)
    if save:  # every action and job with its start time (what the summary's percentiles are made of)
        Path(save).write_text(json.dumps({k: report[k] for k in ("actions", "jobs", "errors", "leaks")}, indent=0))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--own", type=int, default=8, help="students who also run a trace and an edit")
    ap.add_argument("--think", type=float, default=3.0, help="mean seconds a student reads before each action")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the expert pages per student")
    ap.add_argument("--budget", default=None, help="the jobs' memory budget (EDITKIT_MEMORY_BUDGET), e.g. '2 GB'")
    ap.add_argument("--jobs", type=int, default=None, help="long jobs computing at once (limits.jobs)")
    ap.add_argument("--timeout", type=float, default=1800,
                    help="seconds any one page run may take (a queued job's run waits for its turn)")
    ap.add_argument("--save", default=None, metavar="PATH", help="also write every action and job (JSON) here")
    args = ap.parse_args(argv)
    out = run(args.students, args.own, args.think, args.rounds, args.budget, args.jobs, args.timeout, args.save)
    print(json.dumps(out, indent=1))
    ok = out["errors"] == 0 and out["leaks"] == 0 and out["jobs_finished"] == out["jobs"]
    return 0 if ok and out["peak_under_base_plus_budget"] else 1


if __name__ == "__main__":
    sys.exit(main())
