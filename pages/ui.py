# Over 450 lines: the pieces every page shares, in the one module each page imports.
"""Shared Streamlit pieces: the model picker, the cached model, error boxes, long jobs (queue position,
progress, Cancel) and the session's own edits. Pages stay thin: they gather inputs, call editkit, and draw the
results.

Every computation of a page runs inside `ui.session(lm)`: the edits this browser session kept (sidebar, "Your
edits") are added to the weights for its own computations only; other sessions never see them. A long job that
is one library call is a work item (`run_item`): with $EDITKIT_RAY set it runs on a Ray worker, with those
edits.
"""
from __future__ import annotations

import contextlib
import logging
import re
import runpy
import threading
import time
import traceback
import uuid
from pathlib import Path

import streamlit as st

from editkit.core.errors import Cancelled, EditkitError
from editkit.core.progress import elapsed, gives_time
from editkit.core.settings import limits, settings
from editkit.core.visitor import Visitor, visitor_of
from editkit.model import access, isolation, weights
from editkit.model.hardware import slow_dtype_note
from editkit.model.loading import ALL_TINY, DEFAULT_MODEL, DTYPES, default_device, list_models
from editkit.model.ram import gigabytes
from editkit.model.shipped import SHIPPED
from editkit.runtime import cluster, jobs

log = logging.getLogger("editkit.app")


class K:
    """The session-state keys of the pieces every page shares, each named once (a page declares its own)."""

    MODEL, OTHER, TRUST, DTYPE = "model_choice", "model_other", "model_trust", "model_dtype"
    SESSION = "_editkit_session"  # this browser session's short id
    EDITS = "_editkit_edits"  # model name -> the kept edits
    PATCH = "_editkit_patch"  # the kept edits' patch file, built once per set
    UPLOAD_SEEN = "_editkit_upload_seen"  # the last patch upload read
    CANCELLED = "_editkit_cancelled"  # the job a Cancel click stopped, for the next run's note
    WAITED = "_editkit_waited"  # job name -> seconds from its click to its result
    KEPT = "_kept_inputs"  # inputs kept across visits to other pages
    UNDO, CLEAR, DOWNLOAD, UPLOAD = "edits_undo", "edits_clear", "edits_download", "edits_upload"

    @staticmethod
    def cancel(job: str) -> str:
        return f"cancel_{job}"

    @staticmethod
    def keep(method: str) -> str:
        return f"keep_{method}"

OTHER = "other: hub id, folder or GGUF file"
BUILTIN = (*SHIPPED, *ALL_TINY)  # the embedded model first
DTYPE_CHOICES = tuple(DTYPES)  # float32 first


ENTRYPOINT = Path(__file__).resolve().parent.parent / "app.py"
_APP = threading.local()  # how deep this script thread is inside app.py's navigation run


@contextlib.contextmanager
def navigation_run():
    """app.py's navigation and the page it runs (script_run: a page file run inside it is the app's page)."""
    _APP.depth = getattr(_APP, "depth", 0) + 1
    try:
        yield
    finally:
        _APP.depth -= 1


def script_run(file: str, main=None) -> None:
    """How a file in pages/ runs when Streamlit runs it as a script: the last statement of every page file,
    `main` its page (None for the helper modules). Inside app.py's navigation (a file page) it runs `main`.
    Otherwise this is Streamlit's legacy pages/ mode: a folder named pages/ beside the entrypoint makes a fresh
    server run a page opened by its URL alone, under a list of the folder's files, until a session calls
    st.navigation ("As soon as any session of your app executes the st.navigation command, your app will
    ignore the pages/ directory (across all sessions)": st.navigation's reference; AppTest starts every run
    so). The file then runs the entrypoint in its place, as Streamlit runs it once that holds: app.py calls
    st.navigation, which opens this page by its URL (a helper's URL: the home page), and the legacy run ends
    there. Only public Streamlit is used; tests/test_page_mechanism.py fails when Streamlit stops behaving
    so."""
    if getattr(_APP, "depth", 0):
        if main is not None:
            main()
        return
    log.debug("%s ran as a script outside app.py's navigation (legacy pages/ mode): running app.py", file)
    runpy.run_path(str(ENTRYPOINT), run_name="__main__")
    st.stop()


@st.cache_resource(show_spinner=False)
def _load_builtin(name: str, dtype: str = "float32", _progress=None):
    """The shipped and tiny models: one copy each (per dtype) per server process, shared by every session,
    never evicted (evicting one would load a second copy while sessions still compute with the first)."""
    from editkit.model.loading import load_model

    lm = load_model(name, dtype=dtype, progress=_progress)
    threading.Thread(target=_warm_vocabulary, args=(lm,), name="editkit-vocabulary", daemon=True).start()
    return lm


def _warm_vocabulary(lm) -> None:
    """Decode and classify the model's vocabulary (what FFN memories' value tokens are read with) in the
    background just after the model loads, at a job's CPU priority: built at the first inspection instead, it
    took that student 2-7 s on Gemma 3 270M while the class waited for the same shared result
    (tests/class_load.py)."""
    from editkit.memories.vocab import vocab

    try:
        with jobs.background_priority():
            vocab(lm)
    except Exception:  # noqa: BLE001 - the first inspection builds it then, and says what failed
        log.warning("building the vocabulary of %s in the background "
                    "failed\n%s", lm.name, traceback.format_exc())


@st.cache_resource(show_spinner=False, max_entries=1)
def _load_other(name: str, trust_remote_code: bool, dtype: str = "float32", _progress=None):
    """A hub id or folder: the last one picked stays loaded (large models do not accumulate)."""
    from editkit.model.loading import load_model

    return load_model(name, trust_remote_code=trust_remote_code, dtype=dtype, progress=_progress)


def get_lm(name: str, trust_remote_code: bool = False, dtype: str = "float32", served: bool = False):
    """The model, loaded once per server process; a status box says what the first load is doing (a shipped
    model's download says how many MB of how many have arrived, then its conversion). A name a visitor chose
    is checked against the operator's settings first (editkit/model/access.py); `served`: the name is the
    server's own choice (the lesson pack's model), not a visitor's."""
    if not served:
        access.check_model(name, visitor(), trust_remote_code)
    with st.status(f"Loading {name} ({dtype})...", expanded=False) as status:
        def progress(fraction: float, message: str) -> None:
            if message:
                status.update(label=f"Loading {name} ({dtype}): {message[:160]}")

        if name in BUILTIN:
            lm = _load_builtin(name, dtype, _progress=progress)
        else:
            lm = _load_other(name, trust_remote_code, dtype, _progress=progress)
        status.update(label=f"{lm.name} ready", state="complete")
    return lm


def visitor() -> Visitor:
    """Who this session's browser is (editkit/core/visitor.py): the address the server saw for its connection,
    and whether it is on the server's own machine, from Streamlit's public st.context: the websocket's peer
    (which Streamlit's uvicorn already replaced by X-Forwarded-For's address for a proxy on this machine) and
    the request's headers, every value of a repeated one. st.context.ip_address is None for a browser at
    127.0.0.1 or ::1 (its reference: "When a user accesses the app through localhost, the IP address is None")
    and with no connection at all (AppTest, which sends no headers either): a connection with headers and no
    address is that loopback browser."""
    context = st.context
    headers = [(name, value) for name in dict.fromkeys(context.headers.keys())
               for value in context.headers.get_all(name)]
    peer = context.ip_address
    return visitor_of(peer if peer is not None or not headers else "127.0.0.1", headers)


def pickable_models() -> list[str]:
    """The models this visitor's pickers offer (the operator's models.allowed; every built-in one locally)."""
    return access.pickable(visitor())


@st.cache_data(ttl=30, show_spinner=False)
def _estimate(name: str, dtype: str, trust_remote_code: bool) -> dict | None:
    """The memory estimate of a model before it loads (editkit.model.loading.estimate; the free memory re-read
    every 30 s)."""
    from editkit.model.loading import estimate

    try:
        return estimate(name, dtype, trust_remote_code=trust_remote_code)
    except EditkitError:
        return None


def model_picker():
    """Sidebar model and dtype pickers (embedded model, float32 preselected) with the memory estimate shown
    before the model loads; returns the loaded model, or None when none is picked, it is refused, it does not
    fit, or it fails. The models offered and the "other" box follow the operator's settings (models.allowed,
    models.free, models.trust_remote_code); a refused name says which setting refuses it."""
    who = visitor()
    with st.sidebar:
        st.markdown("### Model")
        choices = access.pickable(who) + ([OTHER] if access.may_type(who) else [])
        pending = {r["name"] for r in list_models() if r.get("cached") is False and r["kind"] == "shipped"}
        current = st.session_state.get(K.MODEL, DEFAULT_MODEL)
        if current not in choices:
            st.session_state.pop(K.MODEL, None)  # e.g. a model the settings no longer offer
        choice = st.selectbox("Model", choices, index=choices.index(current) if current in choices else 0,
                              key=K.MODEL, label_visibility="collapsed",
                              format_func=lambda n: f"{n} (downloaded on first use)" if n in pending else n)
        if not access.may_type(who):
            st.caption(f"Other models (hub ids, folders, GGUF files) cannot be loaded from {who.describe()} "
                       f"({settings().cite('models.free')}).")
        name, trust = choice, False
        if choice == OTHER:
            name = st.text_input("Hub id, local folder or GGUF file", key=K.OTHER,
                                 placeholder="gpt2-xl, /models/llama-2-7b or "
                                             "/models/qwen2.5-0.5b-q8_0.gguf").strip()
            if access.may_trust(who):
                trust = st.checkbox("trust_remote_code", key=K.TRUST, value=False,
                                    help="Runs the model's own Python code on this server.")
            if not name:
                st.info("Type a Hugging Face hub id, a local folder or the path of a GGUF file.")
                return None
        dtype = st.selectbox("Weights", DTYPE_CHOICES, key=K.DTYPE,
                             help="bfloat16 / float16 halve the memory of the weights; the editing algebra "
                                  "(statistics, solves, deltas) stays in float32.")
        try:
            access.check_model(name, who, trust)  # before the estimate reads anything of the name
        except EditkitError as exc:
            st.error(str(exc))
            server_panel()
            return None
        guess = _estimate(name, dtype, trust)
        if guess is None:
            st.caption("Memory: unknown until the model's config can be read.")
        elif not guess["fits"]:
            st.error(guess["text"])
            return None
        else:
            st.caption(f"Memory: {guess['text'].split(': ', 1)[-1]}")
        slow = slow_dtype_note(DTYPES[dtype], default_device())  # half the memory, but the slow path here
        if slow is not None:
            st.warning(f"Speed: {slow}.")
    with guard():
        lm = get_lm(name, trust, dtype)
        with st.sidebar:
            edits_panel(lm)
            server_panel()
        return lm
    return None


@contextlib.contextmanager
def guard(what: str = ""):
    """Show user errors as a red box, and unexpected ones as a short message (no traceback); keep running."""
    try:
        yield
    except Cancelled as exc:
        st.info(f"{exc}; earlier results are kept.")
    except EditkitError as exc:
        st.error(f"{what + ': ' if what else ''}{exc}")
    except Exception as exc:  # noqa: BLE001 - the app must survive any failure of one action
        log.error("unexpected error%s\n%s", f" in {what}" if what else "", traceback.format_exc())
        st.error(f"Something went wrong{' in ' + what if what else ''}: {type(exc).__name__}: {exc}. "
                 "Your inputs are kept; try again or change them.")


def clip(text: str, chars: int) -> str:
    """At most `chars` characters of `text`, cut at the last space before the limit (mid-word only for a word
    longer than that) and marked with …: the home page cut a 2,000-character prompt mid-word, unmarked."""
    if len(text) <= chars:
        return text
    cut = text[:chars - 1]
    space = cut.rstrip().rfind(" ")
    return (cut[:space] if space > chars // 2 else cut).rstrip() + "…"


def continuation(text: str) -> str:
    """Generated text as markdown that shows it literally on one line: a newline as ⏎ (a newline in MEMIT's
    continuation began a stray paragraph), a special token (<start_of_image>) as code, so it reads as the
    token it is rather than as a display bug, a run of one special token once with its count (figures'
    compact)."""
    from editkit.figures.lesson import compact

    parts = SPECIAL.split(compact(text))
    return "".join(f"`{p}`" if i % 2 else md_escape(p).replace("\r\n", "\n").replace("\n", " ⏎ ")
                   for i, p in enumerate(parts))


SPECIAL = re.compile(r"(<[^<>\s]{1,40}>(?: ×\d+)?)")  # a special token as generated text shows it


def md_escape(text: str) -> str:
    """Text shown literally inside markdown (a prompt with * _ ` [ ] # $ ... is not formatted)."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~$])", r"\\\1", text)


def model_card(lm) -> None:
    info = lm.describe()
    cols = st.columns(6)
    for col, key in zip(cols, ["family", "layers", "d_model", "d_ff", "parameters", "device"]):
        value = info[key]
        if key == "parameters":
            value = f"{value / 1e6:.1f} M"
        col.metric(key, value)
    st.caption(f"{info['name']} · {info['model_type']} · "
               f"{'parallel' if info['parallel_blocks'] else 'sequential'} attention/MLP blocks · "
               f"vocab {info['vocab']:,} · {info['dtype']}")


# --- long jobs ----------------------------------------------------------------------------------------------
def session_id() -> str:
    """A short id for this browser session (the owner of its jobs)."""
    return st.session_state.setdefault(K.SESSION, uuid.uuid4().hex[:8])


def run_job(name: str, fn, cancel_label: str = "Cancel", on_cancel=None, memory: int = 0,
            niceness: int = jobs.JOB_NICENESS, **caps):
    """Run a long computation fn(progress) as this session's job and return its result. The values in `caps`
    are checked against the server's limits first (e.g. samples=20); `memory` is the job's working memory in
    bytes (the library's estimate), which the queue admits only within the server's memory budget. The job
    then waits for a turn, showing how many jobs are ahead; a progress bar follows it; the Cancel button stops
    it at its next step (any other click does too, and so does closing the browser: the session's script run
    is stopped) and earlier results stay. `on_cancel` replaces the generic "was cancelled" note
    (cancelled_note) with the page's own. `niceness`: the CPU priority it computes at (jobs.py; 0 for a job a
    teacher waits on)."""
    limits().check(**caps)
    who = visitor()
    job = jobs.Job(name, owner=session_id(), memory=int(memory), address=None if who.local else who.address,
                   niceness=niceness)
    box = st.empty()
    with box.container():
        left, right = st.columns([6, 1])
        bar = left.progress(0.0, text=f"{name}: waiting for a turn")
        right.button(cancel_label, key=K.cancel(name), on_click=on_cancel or _cancel_clicked,
                     args=() if on_cancel else (name,),
                     help="Stop this job; earlier results are kept.")

    def draw(fraction: float, text: str) -> None:
        try:
            bar.progress(fraction, text=text)
        except BaseException:  # the session's run was stopped (a click, a closed browser): the job is off
            job.cancel()
            raise

    def waiting(ahead: int, running: int) -> None:
        why = job.message or "waiting for a turn"
        draw(0.0, f"{name}: {why} ({running} job(s) running, {ahead} ahead of yours)")

    def show(f: float, msg: str) -> None:
        left = None if gives_time(msg) else job.left()  # the library's own estimate, where it gives one, wins
        draw(f, (f"{name}: {msg}" if msg else name) + (f" ({left} in all)" if left else ""))

    job.on_progress = show
    # This session's job still in the queue is one its stopped script run left computing (a Cancel, or any
    # click, starts the new run at once): cancelled now, it stops at its next progress step and this one waits
    # for that, saying so ("Add the fact" clicked just after a Cancel was refused for the session's one job).
    jobs.QUEUE.supersede(job.owner)
    start = time.monotonic()
    try:
        result = jobs.run(job, fn, on_wait=waiting)
    finally:
        box.empty()
    st.session_state.setdefault(K.WAITED, {})[name] = time.monotonic() - start
    return result


def waited(name: str, computed: float | None = None) -> str:
    """How long the person waited for the last result of job `name`, from the click to the result (the queue,
    the loading and this machine's load included), beside the library's own `computed` seconds when the two
    differ: Attention vs FFN said "computed in 21.3 s" after 274.6 s from the click."""
    wall = st.session_state.get(K.WAITED, {}).get(name)
    if wall is None:  # a result kept from before this session's last run of the job (or from a shipped file)
        return f"computed in {elapsed(computed)}" if computed is not None else ""
    said = f"you waited {elapsed(wall)} from the click"
    if computed is not None and wall - computed > max(2.0, 0.1 * wall):
        said += (f"; the computation itself took {elapsed(computed)}, the rest was waiting for a turn and "
                 "this machine's other work")
    return said


def run_item(name: str, lm, item: cluster.Item, cancel_label: str = "Cancel", on_cancel=None, memory: int = 0,
             **caps):
    """Run a long computation described as a work item (editkit/runtime/cluster.py: a library function fn(lm,
    *args, **kwargs, progress=...) and its arguments, progress=True) as this session's job (run_job: limits,
    queue, progress bar, Cancel), with this session's kept edits. With $EDITKIT_RAY set (e.g. local:2 or the
    head's host:port) it runs on a Ray worker, the kept edits shipped with it as deltas, and this server
    process only waits and draws; otherwise it runs here, inside `session(lm)`, as before."""
    backend = cluster.backend_from_env()
    kept = [e["delta"] for e in my_edits(lm)]
    return run_job(name, lambda progress: cluster.run_one(lm, item, backend, progress, delta=kept),
                   cancel_label, on_cancel, memory, **caps)


def _cancel_clicked(name: str) -> None:
    # The click itself stops the running job (Streamlit interrupts the script at its next progress update);
    # this only leaves a note for the next run.
    st.session_state[K.CANCELLED] = name


def cancelled_note() -> None:
    name = st.session_state.pop(K.CANCELLED, None)
    if name:
        st.info(f"{name} was cancelled; earlier results are kept.")


def server_panel() -> None:
    """The server's queue, its memory for jobs and every setting in force (sidebar): what the operator set and
    what refuses a visitor's action."""
    snap, conf, who = jobs.QUEUE.snapshot(), settings(), visitor()
    with st.expander(f"Server: {len(snap['running'])} job(s) running, {len(snap['waiting'])} waiting"):
        mine = session_id()
        for state in ("running", "waiting"):
            for j in snap[state]:
                owner = "yours" if j["owner"] == mine else "another user's"
                st.caption(f"{state}: {j['name']} ({owner}) {j['fraction']:.0%} {j['message']}")
        st.caption(f"At most {conf.limits.jobs} long jobs compute at once, within "
                   f"{gigabytes(snap['budget'])} of working memory ({gigabytes(snap['reserved'])} in use; "
                   f"memory.budget = {conf.memory_budget}); the others wait in arrival order. You are on "
                   f"{who.describe()}.")
        rows = conf.table()
        if not who.local:  # the server's paths stay with the operator
            for r in rows:
                if r["setting"] == "models.folders":
                    r["value"] = f"{len(conf.model_folders)} folder(s)"
                said = r["from"] in ("default",) or r["from"].startswith("EDITKIT_")
                r["from"] = r["from"] if said else "file"
        st.caption("**Settings in force** (editkit.toml or the file EDITKIT_CONFIG names, and EDITKIT_* "
                   "variables; the manual's *Serving a class* page):  \n" +
                   "  \n".join(f"`{r['setting']} = {r['value'].replace('`', '')}`"
                                + ("" if r["from"] == "default" else f" ({md_escape(r['from'])})")
                                for r in rows))


def check_upload(upload, kind: str) -> None:
    """EditkitError when an upload is over its kind's cap (settings uploads.<kind>_mb), before it is read."""
    cap, key = settings().upload_cap(kind)
    if upload is not None and upload.size > cap:
        raise EditkitError(f"{upload.name} is {upload.size / 2**20:.1f} MB, over this server's cap for "
                           f"{kind} uploads ({settings().cite(key)})")


def upload_mb(kind: str) -> int:
    """The cap of an upload kind in whole MB, for the uploader's own check in the browser."""
    return max(1, int(settings().upload_cap(kind)[0] // 2**20))


# --- this session's edits -----------------------------------------------------------------------------------
def my_edits(lm) -> list[dict]:
    """The edits this session kept for `lm`: [{"label", "delta", "manifest"}] (oldest first)."""
    return st.session_state.setdefault(K.EDITS, {}).setdefault(lm.name, [])


@contextlib.contextmanager
def session(lm, *deltas):
    """A computation of this session: base weights + the session's kept edits (+ `deltas`), in this context
    only (editkit/model/isolation.py)."""
    with isolation.session(lm, [e["delta"] for e in my_edits(lm)] + [d for d in deltas if d]):
        yield lm


def keep_edit(lm, label: str, delta: dict, manifest: dict) -> bool:
    """Add an edit to this session's kept edits (every page computes with it from now on); False when this
    very edit is already kept."""
    weights.check_delta(lm, delta)
    digest = weights.delta_digest(delta)
    if any(e["digest"] == digest for e in my_edits(lm)):
        return False
    my_edits(lm).append({"label": label, "delta": delta, "manifest": manifest, "digest": digest})
    return True


def keep_buttons(lm, deltas: dict, labels: dict, what: str, manifest: dict) -> None:
    """One "Keep" button per computed edit (method -> delta): keeping one adds it to this session's edits."""
    if not deltas:
        return
    st.markdown("**Keep an edit** (your pages then compute with it; other users never see it):")
    per_row = 3  # six methods in one row cut each label to "Keep the RO…"
    items = list(deltas.items())
    for first in range(0, len(items), per_row):
        for col, (m, delta) in zip(st.columns(per_row), items[first:first + per_row]):
            if col.button(f"Keep the {labels.get(m, m)} edit", key=K.keep(m), width="stretch"):
                with guard("keeping the edit"):
                    if keep_edit(lm, f"{labels.get(m, m)}: {what}", delta, {**manifest, "method": m}):
                        st.rerun()
                    st.info("That edit is already kept.")


def edits_panel(lm) -> None:
    """Sidebar: this session's kept edits, undo, a patch download, and a patch upload."""
    edits = my_edits(lm)
    st.markdown(f"### Your edits ({len(edits)})")
    if edits:
        for e in edits:
            st.caption(f"• {e['label']}")
        st.caption("Every page computes with these edits, for you only; other users never see them.")
        c1, c2 = st.columns(2)
        if c1.button("Undo last", key=K.UNDO):
            edits.pop()
            st.rerun()
        if c2.button("Clear", key=K.CLEAR):
            edits.clear()
            st.rerun()
        st.download_button("Download as a patch", _patch(lm, edits),
                           f"{lm.name.replace('/', '--')}-edits.safetensors", "application/octet-stream",
                           key=K.DOWNLOAD)
    else:
        st.caption("None: the base model. Keep an edit on Edit & compare, or load a patch.")
    upload = st.file_uploader("Load a patch (.safetensors)", type=["safetensors"], key=K.UPLOAD,
                              max_upload_size=upload_mb("patch"))
    if upload is not None and st.session_state.get(K.UPLOAD_SEEN) != upload.file_id:
        st.session_state[K.UPLOAD_SEEN] = upload.file_id
        with guard(f"patch {upload.name}"):
            check_upload(upload, "patch")
            delta, manifest = weights.patch_from_bytes(upload.getvalue(), upload.name)
            if manifest.get("model") not in (None, lm.name):
                raise EditkitError(f"{upload.name} was made for {manifest['model']}, not {lm.name}")
            keep_edit(lm, f"patch {upload.name}", delta, manifest)
            st.rerun()


def _patch(lm, edits: list[dict]) -> bytes:
    """The patch file of these kept edits, built once per set of edits (kept in the session): the sidebar
    draws its download button on every page run, and summing and serializing the deltas each time cost the
    server a few megabytes of copying per click of every student holding an edit."""
    digests = (lm.name, tuple(e.get("digest", id(e["delta"])) for e in edits),
               tuple(e["label"] for e in edits))
    cached = st.session_state.get(K.PATCH)
    if cached is None or cached[0] != digests:
        manifest = {"model": lm.name, "edits": [e["manifest"] | {"label": e["label"]} for e in edits]}
        cached = (digests, weights.patch_bytes(weights.combined([e["delta"] for e in edits]), manifest))
        st.session_state[K.PATCH] = cached
    return cached[1]


def method_list(last: str = "and") -> str:
    """The registered methods' labels as text ("ROME, MEMIT, PMET and AlphaEdit"), so the pages name every
    method without listing them by hand."""
    from editkit.editing.methods import all_methods

    labels = [m.label for m in all_methods()]
    return f"{', '.join(labels[:-1])} {last} {labels[-1]}" if len(labels) > 1 else "".join(labels)


def refuse(errors: dict, names) -> None:
    """Stop a run with the first of `errors` (name -> message) among `names`: invalid input blocks a run."""
    for name in names:
        if name in errors:
            raise EditkitError(errors[name])


# --- inputs that outlive a visit to another page ------------------------------------------------------------
def kept(key: str, default):
    """The value input `key` had when the user last left this page, else `default`: pass it as the widget's
    value. Streamlit forgets a widget's value in a run that does not draw it (a visit to another page), and
    the page came back showing its default example above the results of the user's own request."""
    return st.session_state.get(K.KEPT, {}).get(key, default)


def keep(*keys: str) -> None:
    """Remember the current values of these inputs for `kept` (call it after drawing them)."""
    store = st.session_state.setdefault(K.KEPT, {})
    for k in keys:
        if k in st.session_state:
            store[k] = st.session_state[k]


if __name__ == "__main__":  # Streamlit's legacy pages/ mode serves this file at /ui too
    script_run(__file__)
