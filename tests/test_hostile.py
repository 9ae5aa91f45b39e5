"""A hostile visitor of a served app (Streamlit AppTest on tiny-gpt2, the quick tier): every case is a clear refusal
that names the setting refusing it, and nothing is lost. A session from another machine is simulated by replacing
`pages.ui.visitor` for the sessions the test marks (the served tests in tests/test_hostile_served.py reach the same
code through a real connection and its forwarded address).

Each case first gives two sessions a result of their own (a prediction; the bystander also keeps an edit), then
tries the hostile action in one of them, and checks the refusal text, that the hostile session's earlier result is
still there, and that the bystander's result and kept edit are untouched. Cases: model names outside the allowed
list, `../` and absolute paths, a symlink out of the open folders, a folder with its own Python code, the
trust_remote_code box, `?teacher=1` from another machine, uploads over their cap, patches crafted for another
model or with NaN or huge values, a session's second job (it replaces its first), more jobs than a visitor's
quota, a job larger than the memory budget, and malformed query parameters on every page.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import streamlit as st
import torch
from streamlit.testing.v1 import AppTest

from editkit.core.errors import Cancelled
from editkit.core.visitor import Visitor
from editkit.model.loading import load_model
from editkit.model.weights import patch_bytes
from editkit.runtime import jobs

APP = str(Path(__file__).resolve().parent.parent / "app.py")
MODEL = "tiny-gpt2"
OTHER = "other: hub id, folder or GGUF file"
REMOTE = Visitor("203.0.113.7", False)
PAGES = ["home", "causal_tracing", "ffn_memories", "edit_compare", "attention_vs_ffn", "lesson"]


class Config:
    """The operator's settings file for the test: each write is a new file that EDITKIT_CONFIG names."""

    def __init__(self, folder: Path, monkeypatch):
        self.folder, self.mp, self.n = folder, monkeypatch, 0

    def write(self, text: str = "") -> Path:
        self.n += 1
        path = self.folder / f"editkit-{self.n}.toml"
        path.write_text('[models]\nallowed = ["tiny-gpt2"]\n' + text, encoding="utf-8")
        self.mp.setenv("EDITKIT_CONFIG", str(path))
        return path


@pytest.fixture
def config(tmp_path, monkeypatch):
    """A private cache and class database, the tiny model as the one allowed model, and sessions marked
    `_test_remote` in their state seen as REMOTE (the others as this machine's browser)."""
    from pages import ui

    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cache"))
    for var in ("EDITKIT_LIMITS", "EDITKIT_TEACHER_PASSPHRASE", "EDITKIT_MEMORY_BUDGET"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(ui, "visitor", lambda: REMOTE if st.session_state.get("_test_remote") else
                        Visitor(None, True))
    conf = Config(tmp_path, monkeypatch)
    conf.write()
    return conf


def open_page(page: str = "home", remote: bool = True, query: dict | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = MODEL
    if remote:
        at.session_state["_test_remote"] = True
    for k, v in (query or {}).items():
        at.query_params[k] = v
    if page != "home":
        at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def open_after_home(page: str, remote: bool = True, query: dict | None = None) -> tuple[AppTest, tuple]:
    """A session that predicted on the home page first (its earlier result), then opened `page`."""
    at = open_page(remote=remote)
    before = shown(at)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at, before


def texts(at: AppTest) -> str:
    """Every error, warning and caption on the page and in the sidebar, as one text."""
    parts = [e.value for e in at.error] + [w.value for w in at.warning] + [c.value for c in at.caption]
    parts += [c.value for c in at.sidebar.caption] + [w.value for w in at.sidebar.warning]
    return "\n".join(parts)


def refused(at: AppTest, *needles: str) -> None:
    """No exception, no "Something went wrong", and an error or warning box holding every needle."""
    assert not at.exception, [e.value for e in at.exception]
    boxes = [e.value for e in at.error] + [w.value for w in at.warning] + [w.value for w in at.sidebar.warning]
    assert not any("Something went wrong" in b for b in boxes), boxes
    assert any(all(n in b for n in needles) for b in boxes), (needles, boxes)


@pytest.fixture
def bystander(config):
    """Another student's session with a prediction and a kept edit, checked again after each hostile case."""
    at = open_page(remote=False)
    lm = load_model(MODEL, device="cpu")
    name = lm.adapter.param_name("down_proj", 1)
    shape = dict(lm.model.named_parameters())[name].shape
    data = patch_bytes({name: torch.full(shape, 0.05)}, {"model": MODEL})
    at.file_uploader(key="edits_upload").set_value(("mine.safetensors", data, "application/octet-stream")).run()
    assert len(at.session_state["_editkit_edits"][MODEL]) == 1
    before = shown(at)[0]
    yield at
    at.run()  # the bystander's page after the hostile case: the same edit, the same prediction
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert len(at.session_state["_editkit_edits"][MODEL]) == 1
    assert shown(at)[0] == before


def shown(at: AppTest) -> tuple:
    """The home page's prediction and logit lens in this session, as JSON (the typed results the page keeps)."""
    return tuple(r.to_json() for r in at.session_state["home_result"])


def kept_result(at: AppTest, before: tuple) -> None:
    assert shown(at) == before, "the hostile session's earlier result is kept"


# --- models -------------------------------------------------------------------------------------------------------
def test_a_remote_visitor_picks_only_the_allowed_models(config, bystander):
    at = open_page()
    before = shown(at)
    options = at.selectbox(key="model_choice").options
    assert options == [MODEL], options  # no other box, no tiny models beyond the allowed one, no Gemma
    assert 'models.free = "local", the default' in texts(at)
    assert not [c for c in at.sidebar.checkbox if c.key == "model_trust"]
    at.run()
    kept_result(at, before)
    fresh = AppTest.from_file(APP, default_timeout=300)  # a name the picker does not offer falls back to the first
    fresh.session_state["model_choice"], fresh.session_state["_test_remote"] = "../../etc", True
    fresh.run()
    assert not fresh.exception and not fresh.error
    assert fresh.session_state["model_choice"] == MODEL


def test_a_local_browser_may_type_a_model_but_never_tick_trust_remote_code(config):
    at = open_page(remote=False)
    assert OTHER in at.selectbox(key="model_choice").options
    at.selectbox(key="model_choice").set_value(OTHER).run()
    assert not [c for c in at.sidebar.checkbox if c.key == "model_trust"]  # models.trust_remote_code = nobody


@pytest.fixture
def folders(tmp_path):
    """An open models folder with a good tiny model, a folder with its own code and a symlink to a model outside;
    and a model folder outside it."""
    lm = load_model(MODEL, device="cpu")
    root, outside = tmp_path / "models", tmp_path / "private"
    for folder in (root / "good", outside / "secret"):
        lm.model.save_pretrained(folder)
        lm.tok.save_pretrained(folder)
    custom = root / "custom"
    lm.model.save_pretrained(custom)
    cfg = json.loads((custom / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilModel"}
    (custom / "config.json").write_text(json.dumps(cfg))
    (custom / "modeling_evil.py").write_text("import os\nos.system('touch /tmp/editkit-pwned')\n")
    os.symlink(outside / "secret", root / "link")
    return root, outside


FOLDER_CASES = [
    ("dot-dot", lambda root, out: f"{root}/../private/secret", "is not inside the folders"),
    ("absolute outside", lambda root, out: str(out / "secret"), "is not inside the folders"),
    ("system path", lambda root, out: "/etc", "is not inside the folders"),
    ("symlink out", lambda root, out: str(root / "link"), "is not inside the folders"),
    ("own python code", lambda root, out: str(root / "custom"), "brings its own Python code"),
]


@pytest.mark.parametrize("case,path,expect", FOLDER_CASES, ids=[c[0] for c in FOLDER_CASES])
def test_paths_outside_the_open_folders_are_refused(config, bystander, folders, case, path, expect):
    root, outside = folders
    config.write(f'free = "anyone"\nfolders = ["{root}"]\n')
    at = open_page()
    before = shown(at)
    at.selectbox(key="model_choice").set_value(OTHER).run()
    at.text_input(key="model_other").set_value(path(root, outside)).run()
    refused(at, expect, "setting models.")
    assert not at.metric, "no model card: nothing was loaded"
    assert str(outside) not in texts(at) or case in ("absolute outside", "dot-dot"), "no server path revealed"
    kept_result(at, before)
    assert not Path("/tmp/editkit-pwned").exists()


def test_a_model_inside_the_open_folders_loads(config, folders):
    root, _ = folders
    config.write(f'free = "anyone"\nfolders = ["{root}"]\n')
    at = open_page()
    at.selectbox(key="model_choice").set_value(OTHER).run()
    at.text_input(key="model_other").set_value(str(root / "good")).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.metric, "the model card of the loaded model"


def test_without_open_folders_a_remote_visitor_types_hub_ids_only(config, bystander):
    config.write('free = "anyone"\n')
    at = open_page()
    at.selectbox(key="model_choice").set_value(OTHER).run()
    at.text_input(key="model_other").set_value("/etc/passwd").run()
    refused(at, "model paths are not open to visitors", "models.folders = [], the default")


# --- teacher mode -------------------------------------------------------------------------------------------------
@pytest.fixture
def lesson_env(config, tmp_path_factory, monkeypatch):
    from lesson_util import tiny_pack

    monkeypatch.setenv("EDITKIT_LESSON", str(tiny_pack(tmp_path_factory)))


def teacher_shown(at: AppTest) -> bool:
    return any(h.value == "Teacher" for h in at.header)


def test_teacher_mode_from_another_machine_needs_a_passphrase(lesson_env, bystander):
    at, before = open_after_home("lesson", query={"teacher": "1"})
    assert not teacher_shown(at)
    refused(at, "needs a passphrase", "teacher.passphrase = (not set), the default")
    kept_result(at, before)
    local = open_page("lesson", remote=False, query={"teacher": "1"})
    assert teacher_shown(local)  # a browser on the server's own machine: the laptop case


def test_a_passphrase_in_the_settings_file_guards_teacher_mode(lesson_env, config, bystander):
    config.write('[teacher]\npassphrase = "owl"\n')
    for remote in (True, False):
        at, before = open_after_home("lesson", remote=remote, query={"teacher": "1"})
        assert not teacher_shown(at)
        at.text_input(key="lesson_teacher_pass").set_value("cat").run()
        assert not teacher_shown(at)
        refused(at, "That is not the teacher passphrase", "teacher.passphrase = (set), from")
        kept_result(at, before)
        at.text_input(key="lesson_teacher_pass").set_value("owl").run()
        assert teacher_shown(at)


# --- uploads and patches ------------------------------------------------------------------------------------------
def _patch(values, manifest=None, param=None) -> bytes:
    lm = load_model(MODEL, device="cpu")
    name = param or lm.adapter.param_name("down_proj", 2)
    shape = dict(lm.model.named_parameters())[name].shape
    return patch_bytes({name: values(shape)}, {"model": MODEL} if manifest is None else manifest)


PATCH_CASES = [
    ("over the cap", lambda: _patch(lambda s: torch.randn(s) * 1e-3), "over this server's cap for patch uploads"),
    ("another model", lambda: _patch(lambda s: torch.zeros(s), {"model": "gemma-3-270m"}), "made for gemma-3-270m"),
    ("another model's layer", lambda: patch_bytes({"model.layers.40.mlp.down_proj.weight": torch.zeros(2, 2)}, {}),
     "this model does not have"),
    ("NaN", lambda: _patch(lambda s: torch.full(s, float("nan"))), "not finite"),
    ("huge", lambda: _patch(lambda s: torch.full(s, 1e30)), "times its own norm"),
    ("100x the weight", lambda: _patch(lambda s: torch.randn(s) * 20), "limits.patch_scale = 10, the default"),
]


@pytest.mark.parametrize("case,data,expect", PATCH_CASES, ids=[c[0] for c in PATCH_CASES])
def test_crafted_patches_are_refused(config, bystander, case, data, expect):
    if case == "over the cap":
        config.write("[uploads]\npatch_mb = 0.01\n")
    at = open_page()
    before = shown(at)
    at.file_uploader(key="edits_upload").set_value((f"{case}.safetensors", data(), "application/octet-stream"))
    at.run()
    refused(at, expect)
    if case == "over the cap":
        refused(at, "uploads.patch_mb = 0.01, from")
    assert at.session_state["_editkit_edits"][MODEL] == []  # nothing applied
    kept_result(at, before)


def test_records_over_the_cap_are_refused(config, bystander):
    config.write("[uploads]\nrecords_mb = 0.001\n")
    at, before = open_after_home("edit_compare")
    at.radio(key="ec_source").set_value("Upload my records").run()
    records = [{"prompt": "{} is in", "subject": "Paris", "target_new": {"str": "Rome"}}] * 40
    at.file_uploader(key="ec_upload").set_value(("many.json", json.dumps(records).encode(), "application/json"))
    at.run()
    refused(at, "over this server's cap for records uploads", "uploads.records_mb = 0.001")
    kept_result(at, before)


# --- jobs: quotas and memory --------------------------------------------------------------------------------------
class Held:
    """Queue entries held by other threads (jobs of a given owner and address) until release()."""

    def __init__(self):
        self.gate, self.threads, self.stopped = threading.Event(), [], []

    def hold(self, owner: str, address: str | None = None, step: float | None = None) -> jobs.Job:
        """`step`: the job reaches a progress step every `step` seconds (where a cancel stops it, as a real job's
        does); None: it never does."""
        ready, job = threading.Event(), jobs.Job("held", owner=owner, address=address)

        def run():
            try:
                with jobs.QUEUE.slot(job):
                    ready.set()
                    while not self.gate.wait(step or 60) and step:
                        job.progress(0.5, "holding")
            except Cancelled:
                self.stopped.append((job, time.monotonic()))
        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)
        assert ready.wait(10)
        return job

    def release(self) -> None:
        self.gate.set()
        for t in self.threads:
            t.join(10)


@pytest.fixture
def held():
    h = Held()
    yield h
    h.release()
    snap = jobs.QUEUE.snapshot()
    assert snap["running"] == [] and snap["waiting"] == []


def _trace(at: AppTest) -> AppTest:
    at.number_input(key="trace_samples").set_value(2)
    return [b for b in at.button if b.label == "Trace"][0].click().run()


def still_held(n: int) -> None:
    """The earlier jobs are still in the queue, running: a refusal cancels nothing."""
    assert [j["name"] for j in jobs.QUEUE.snapshot()["running"]] == ["held"] * n, jobs.QUEUE.snapshot()


def test_a_sessions_new_job_replaces_its_earlier_one_and_never_runs_beside_it(config, held, monkeypatch):
    """A session's job still in the queue when it starts another belongs to a script run that was stopped (a Cancel
    or any click starts the next run at once; the old job computes on to its next progress step). The new job
    cancels it and waits for it to stop, instead of being refused for the session's quota ("Add the fact" right
    after a Cancel was refused): a session never has two jobs computing, and other sessions are not held back."""
    monkeypatch.setenv("EDITKIT_LIMITS", '{"jobs": 4}')
    at, _ = open_after_home("causal_tracing")
    mine = at.session_state["_editkit_session"]
    earlier = held.hold(mine, step=0.2)  # this session's earlier job, still computing
    admitted, real = [], jobs.QUEUE._admit

    def admit(job):
        ok = real(job)
        if ok:
            admitted.append((job.name, time.monotonic(), [j.name for j in jobs.QUEUE._running
                                                          if j.owner == job.owner and j is not job]))
        return ok

    monkeypatch.setattr(jobs.QUEUE, "_admit", admit)
    _trace(at)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert earlier.cancelled and earlier.state == "cancelled" and held.stopped
    [(name, when, beside)] = admitted
    assert name == "causal trace" and beside == [] and when >= held.stopped[0][1]
    assert at.session_state["trace_state"]["exact"]  # the new trace ran
    other = open_page("causal_tracing", remote=False)  # another session is not held back
    _trace(other)
    assert not other.exception and not other.error and other.session_state["trace_state"]["exact"]


def test_one_address_gets_its_quota_across_its_sessions(config, held, monkeypatch):
    monkeypatch.setenv("EDITKIT_LIMITS", '{"jobs": 5, "visitor_jobs": 2}')
    for owner in ("tab1", "tab2"):  # two other tabs of the same visitor hold a job each
        held.hold(owner, REMOTE.address)
    at, before = open_after_home("causal_tracing")
    _trace(at)
    refused(at, "your address already has 2 long jobs", "limits.visitor_jobs = 2, from EDITKIT_LIMITS")
    still_held(2)
    kept_result(at, before)
    local = open_page("causal_tracing", remote=False)
    _trace(local)
    assert not local.error and local.session_state["trace_state"]["exact"]


def test_a_job_larger_than_the_memory_budget_is_refused_with_the_numbers(config, bystander, monkeypatch):
    monkeypatch.setenv("EDITKIT_MEMORY_BUDGET", "0.1 MB")
    at, before = open_after_home("causal_tracing")
    _trace(at)
    refused(at, "of working memory, more than this server's budget for jobs, 0.1 MB",
            'memory.budget = "0.1 MB", from EDITKIT_MEMORY_BUDGET')
    assert not at.session_state["trace_state"]["exact"]
    assert jobs.QUEUE.snapshot()["running"] == [], "refused before it started"
    kept_result(at, before)


# --- query parameters ---------------------------------------------------------------------------------------------
JUNK = {"model": "../../etc/passwd", "page": "../../app", "embed": "maybe", "%00": "%ff", "step": "-1",
        "model_choice": "/etc", "lesson_step": "99", "x" * 300: "y" * 5000}
QUERIES = [{**JUNK, "teacher": "1\x00"}, {"teacher": ["1", "0"]}, {"teacher": "2" * 5000}, {"teacher": "TRUE"}]


@pytest.mark.parametrize("page", PAGES)
def test_malformed_query_parameters_change_nothing(lesson_env, bystander, page):
    """Junk, repeated, huge and NUL-holding parameters: the page draws as without them, no teacher view, the
    session's earlier prediction kept."""
    for query in QUERIES:
        at, before = open_after_home(page, query=query) if page != "home" else (open_page(query=query), None)
        assert not at.exception and not at.error, (query, [e.value for e in at.error])
        assert not teacher_shown(at)
        assert page == "lesson" or at.session_state["model_choice"] == MODEL
        if before is not None:
            kept_result(at, before)
