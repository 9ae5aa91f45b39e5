"""Lesson: locate-then-edit in eleven steps for a class. Each step asks a question before it shows anything
(predict, then reveal), checks the answer, shows the result editkit computed for the fact (from a class pack:
instant, no model), explains it in a few sentences and a formula, and lets the student run the same view on
their own prompt (through the job queue). A teacher adds facts and sees the class's answers per step.

The pack: $EDITKIT_LESSON, else the class's copy in the cache (a teacher added facts), else assets/lesson/.
"""
import hmac
import math

import pandas as pd
import streamlit as st

from editkit.core.errors import EditkitError
from editkit.core.progress import part
from editkit.core.settings import settings as server_settings
from editkit.editing.requests import NEIGHBOURS_HELP, NEIGHBOURS_LABEL
from editkit.figures import lesson as figs
from editkit.figures.tracing import depth_comparison
from editkit.lesson import classroom, compute, grading, reference
from editkit.lesson import pack as packs
from pages import ui
from pages.two_models import second_model_picker

ui.leave_legacy_multipage_mode()

STEPS = {1: "Next-token prediction and the logit lens", 2: "Causal tracing: which state carries the fact?",
         3: "MLP or attention? Windows and severing", 4: "FFN memories at the traced peak",
         5: "Edit the fact with ROME", 6: "Where does the new fact live now?",
         7: "Side effects: which neighbours move?", 8: "The methods side by side",
         9: "Does the traced layer edit best?", 10: "After hundreds of edits",
         11: "Ripple effects: which facts follow the edit?"}
FEEDBACK = {"right": st.success, "close": st.info, "wrong": st.warning}
TARGET_SEP = " → "  # a stored answer of steps 5-8: "<fact id> → <new target>"


st.title("Lesson: locate, then edit")


# --- the pack, the fact, the student's answers --------------------------------------------------------------
@st.cache_resource(show_spinner=False, max_entries=4)
def _open_pack(folder: str, stamp: float) -> packs.Pack:
    """One parsed pack per server (every session reads the same parts from memory); reopened on a change."""
    return packs.Pack.open(folder)


def current_pack() -> packs.Pack:
    folder = packs.served_folder()
    try:
        stamp = (folder / packs.MANIFEST).stat().st_mtime
    except OSError:
        stamp = 0.0
    return _open_pack(str(folder), stamp)


@st.cache_resource(show_spinner=False)
def _store(path: str) -> classroom.ClassStore:
    return classroom.ClassStore(path)


def class_store() -> classroom.ClassStore:
    return _store(str(classroom.default_path()))


def lesson_id(pack: packs.Pack) -> str:
    return classroom.class_id(pack.manifest)


def answers() -> dict:
    """This session's answers: "<fact>:<step>" -> {"grade": Grade dict or None (skipped), "row": its row}."""
    return st.session_state.setdefault("lesson_answers", {})


def fact_label(f: dict) -> str:
    r = f["request"]
    return f"{r['prompt'].replace('{}', r['subject'])} → {r['target_true'].strip()}"


def pack_methods(pack) -> str:
    """The intro's methods: the pack's, then the registered ones it lacks (it named six above a lesson of four)."""
    from editkit.editing.methods import all_methods
    from editkit.evaluation.verdict import and_list

    names = pack.manifest.get("method_names") or []
    mine = [m["label"] for m in pack.manifest.get("methods", []) if m["name"] in names]
    other = [m.label for m in all_methods() if m.name not in names]
    if not mine:
        return and_list(other)
    return f"this lesson: {and_list(mine)}" + (f"; editkit also has {and_list(other)}, which step 8's “try your own” "
                                             "runs" if other else "")


def fact_short(f: dict) -> str:
    """The sidebar's name of a fact, subject → answer: the whole prompt was cut at the sidebar's width ("The Eiffel
    Tower is located in the"), losing the answer; the page heads every step with the whole fact."""
    r = f["request"]
    return f"{r['subject'].strip()} → {r['target_true'].strip()}"


def needs(pack: packs.Pack, fid: str, name: str, what: str):
    """A part of the pack, or a note that the pack lacks it (an interrupted build) and None."""
    value = pack.part(fid, name)
    if value is None:
        st.info(f"This step has no {what} for this fact: the pack was built without it. Your teacher can "
                "complete the pack (the same `python -m editkit lesson build` command again computes only what "
                "is missing).")
    return value


@st.cache_resource(show_spinner=False, max_entries=512)
def _figure(key: tuple, _build):
    return _build()


def chart(where, build, key: str, part=None, *extra) -> None:
    """Draw build()'s figure. A figure of a pack's part (`part` given) is built once per server and shared by
    every session (its key: the pack, its version, the part and `extra`); a live result's is built each
    time."""
    if part is not None:
        pack = current_pack()
        fig = _figure((str(pack.folder), pack.stamp(), id(part), key, *extra), build)
    else:
        fig = build()
    where.plotly_chart(fig, width="stretch", key=key)


# --- asking, checking, revealing ----------------------------------------------------------------------------
def answer_key(fid: str, n: int, target: int | None = None) -> str:
    """Where a step's answer is kept: per fact, and per new target for the steps about an edit."""
    return f"{fid}:{n}" if target is None else f"{fid}:{n}:{target}"


def ask(pack, fid: str, n: int, question: str, widgets, grade, show, target: int | None = None, above=None,
        keys=()) -> dict | None:
    """The question of step n (its inputs drawn by `widgets()` inside a form, which returns the answer); on
    "Check my answer" the answer is graded (`grade(answer)` -> Grade), kept in the session and counted for the
    class, and `show(done)` draws the result. `target`: the new target the step is about (steps 5-8). `above()`
    draws what the student clicks before the reveal (the empty grid), gone with the form. `keys`: the session keys
    of the answer's inputs, cleared by "Answer again" so that nothing shows an old pick. Returns the stored answer
    once the step is revealed, else None.

    Everything after the question sits in one container: the step's explanation and "try your own" below keep
    their place in the page whatever the reveal adds (an element whose place changes is drawn anew, and an open
    expander drawn anew is closed)."""
    key = answer_key(fid, n, target)
    st.markdown(f"**Your prediction first.** {question}")
    with st.container():
        done = answers().get(key)
        if done is None:
            box = st.empty()  # the grid and the form go once the answer is in
            with box.container():
                if above is not None:
                    above()
                with st.form(f"lesson_form_{n}_{fid}"):
                    answer = widgets()
                    c1, c2 = st.columns([1, 3])
                    check = c1.form_submit_button("Check my answer", type="primary")
                    skip = c2.form_submit_button("Skip: just show me")
            if check:
                with ui.guard():  # "pick a cell first" and the like, as they are
                    done = record(pack, fid, n, question, grade(answer).to_dict(), answer, target)
            elif skip:
                done = answers()[key] = {"grade": None, "row": None}
            if done is not None:
                box.empty()
        if done is None:
            return None
        g = done["grade"]
        if g is None:
            st.caption("Skipped: the result is shown without a prediction.")
        else:
            FEEDBACK[g["verdict"]](f"**{g['verdict'].capitalize()}** (your answer: {ui.md_escape(g['choice'])}). "
                                   f"{ui.md_escape(g['feedback'])}")
        st.button("Answer again", key=f"lesson_again_{n}_{fid}", on_click=answer_again, args=(key, keys))
        show(done)
    return done


def record(pack, fid: str, n: int, question: str, g: dict, answer, target: int | None) -> dict:
    """Keep a graded answer in the session and count it for the class."""
    done = {"grade": g, "row": classroom.answer_row(fact_label(pack.fact(fid)), n, question, g), "answer": answer}
    answers()[answer_key(fid, n, target)] = done
    try:
        where = fid if target is None else f"{fid}{TARGET_SEP}{pack.fact(fid)['targets'][target].strip()}"
        class_store().record(lesson_id(pack), where, str(n), ui.session_id(), g["choice"], g["verdict"],
                             g["score"])
    except Exception:  # noqa: BLE001 - the class view is optional; the student's own answer stays
        ui.log.warning("could not record an answer for the class view", exc_info=True)
    return done


def answer_again(key: str, keys) -> None:
    """"Answer again": the answer and every input of it go (a pick left in the grid but not in the form was graded
    as token 0, layer 0)."""
    answers().pop(key, None)
    for k in keys:
        st.session_state.pop(k, None)


def explain(text: str, formulas=(), sections=()) -> None:
    """Two or three sentences, the formula(s), and the reference text of the former Learn page."""
    st.markdown(text)
    for f in formulas:
        st.latex(f)
    for name in sections:
        title = reference.title(name)  # the references section is titled "References": not "Reference: References"
        with st.expander(title if title.lower().startswith("reference") else f"Reference: {title}"):
            draw(reference.body(name))


def draw(blocks) -> None:
    """Reference text (editkit/lesson/reference.py): titles, paragraphs and formulas."""
    for kind, text in blocks:
        {"title": st.subheader, "text": st.markdown, "latex": st.latex}[kind](text)


def try_own(n: int, what: str, inputs, run, show, **caps) -> None:
    """The same view live on the student's input: `inputs()` draws the inputs and returns them (or None),
    `run(lm, progress, value)` computes as a job in the server's queue, `show(result)` draws it."""
    with st.expander(f"Try your own: {what}"):
        value = inputs()
        if st.button("Run it", key=f"lesson_own_go_{n}", disabled=value is None):
            with ui.guard(what):
                pack = current_pack()
                lm = ui.get_lm(pack.model, served=True)
                limit = {k: v(value) if callable(v) else v for k, v in caps.items()}
                st.session_state[f"lesson_own_{n}"] = ui.run_job(
                    f"lesson step {n}", lambda progress: run(lm, progress, value),
                    memory=compute.own_memory(lm, n, settings(pack)), **limit)
        ui.cancelled_note()
        result = st.session_state.get(f"lesson_own_{n}")
        if result is not None:
            with ui.guard(what):
                show(result)


def settings(pack) -> compute.Settings:
    return compute.Settings.from_dict(pack.manifest.get("settings"))


def _lines(text: str) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def own_request(n: int, fact: dict, neighbours: bool = False):
    """Inputs of a request of the student's own (prefilled with the fact's); the EvalRecord, or None."""
    r = fact["request"]
    c1, c2 = st.columns(2)
    prompt = c1.text_input("Prompt with {} for the subject", r["prompt"], key=f"lesson_own_prompt_{n}")
    subject = c2.text_input("Subject", r["subject"], key=f"lesson_own_subject_{n}")
    c3, c4 = st.columns(2)
    true = c3.text_input("True target (what the model says now)", r["target_true"].strip(),
                         key=f"lesson_own_true_{n}")
    new = c4.text_input("New target", fact["targets"][0].strip(), key=f"lesson_own_new_{n}")
    extra = ""
    if neighbours:
        extra = st.text_area(NEIGHBOURS_LABEL + " (one per line)", "\n".join(r["neighborhood_prompts"][:3]),
                             key=f"lesson_own_neigh_{n}", help=NEIGHBOURS_HELP)
    try:
        return compute.record_of({"prompt": prompt, "subject": subject, "target_true": true,
                                  "target_new": new, "neighborhood_prompts": _lines(extra)})
    except EditkitError as exc:
        st.caption(f"⚠ {exc}")
        return None


# --- the steps ----------------------------------------------------------------------------------------------
def step_lens(pack, fid, fact):
    lens = needs(pack, fid, "lens", "logit lens")
    if lens is None:
        return
    L = len(lens["layers"])
    done = ask(pack, fid, 1, f"The model reads “{ui.md_escape(lens['prompt'])}”. Reading its residual stream "
                             f"after each of its {L} layers through the final norm and unembedding: at which "
                             f"layer does {lens['answer']!r} first become the top token?",
               lambda: st.slider("Layer", 0, L - 1, L // 2, key=f"lesson_q1_{fid}"),
               lambda layer: grading.grade_lens(lens, int(layer)), lambda done: show_lens(lens),
               keys=[f"lesson_q1_{fid}"])
    explain(
        "A language model turns the prompt into a probability for every possible next token: the last "
        "layer's residual stream goes through the final norm and the unembedding W_U. The **logit lens** "
        "applies the same readout to the residual stream h_l after every layer l: what the model would say "
        "if it stopped there. Geva et al. (2021, Fig. 9) found that many predictions are already fixed "
        "before the last layer.",
        [r"p_l(x) = \mathrm{softmax}\big(W_U \cdot \mathrm{norm}(h_l)\big)[x]"])
    try_own(1, "the prediction and logit lens of your prompt",
            lambda: st.text_input("Prompt", fact_prompt(fact), key="lesson_own_prompt_1") or None,
            lambda lm, progress, prompt: compute.lens(lm, prompt, None, settings(pack).lens_k),
            lambda r: show_lens(r, "own"))


def fact_prompt(fact: dict) -> str:
    r = fact["request"]
    return r["prompt"].replace("{}", r["subject"])


def show_lens(lens: dict, key: str = "pack") -> None:
    top = lens["top"][0]
    st.markdown(f"Most likely next token after “{ui.md_escape(lens['prompt'][:200])}”: "
                f"**{ui.md_escape(repr(top['token']))}** (p = {top['prob']:.3f}).")
    left, right = st.columns([1, 3])
    left.dataframe(pd.DataFrame([{"token": repr(p["token"]), "p": round(p["prob"], 4)} for p in lens["top"]]),
                   hide_index=True, width="stretch")
    chart(right, lambda: figs.lens_figure(lens), f"lesson_lens_{key}", lens if key == "pack" else None)
    st.caption("Layer 0 at the bottom, the last layer on top (as on the Home page); a token cut with … is shown "
               "whole when you point at its cell.")


def pick_cell(fid: str, n: int, trace: dict, title: str):
    """The empty grid the student clicks before the reveal (drawn by `ask` above the form; the click fills the
    token and layer inputs) -> (draw the grid, the form's widgets, the session keys of the pick)."""
    tkey, lkey = f"lesson_q{n}_token_{fid}", f"lesson_q{n}_layer_{fid}"  # the form's inputs
    gkey = f"lesson_q{n}_grid_{fid}"

    def clicked():
        points = (st.session_state.get(gkey) or {}).get("selection", {}).get("points", [])
        if points and points[0].get("customdata"):
            st.session_state[tkey], st.session_state[lkey] = (int(v) for v in points[0]["customdata"][:2])

    def grid():
        picked = (st.session_state.get(tkey), st.session_state.get(lkey))
        st.plotly_chart(figs.pick_grid(trace, picked if None not in picked else None, title), width="stretch",
                        key=gkey, on_select=clicked, selection_mode="points")

    widgets = cell_widgets(tkey, lkey, figs.token_labels(trace), len(trace["scores"][0]))
    return grid, widgets, (tkey, lkey, gkey)


def picked_cell(done: dict):
    """The student's (token, layer), when they answered (not skipped)."""
    cell = done.get("answer") if done.get("grade") else None
    return tuple(int(v) for v in cell) if cell and None not in cell else None


def cell_widgets(tkey: str, lkey: str, labels: list[str], n_layers: int):
    def widgets():
        c1, c2 = st.columns(2)
        # no default when a click already set the value (Streamlit warns about both)
        first = {} if tkey in st.session_state else {"index": None}
        token = c1.selectbox("Token", range(len(labels)), format_func=lambda i: labels[i], key=tkey,
                             placeholder="pick a token", **first)
        first = {} if lkey in st.session_state else {"value": None}
        layer = c2.number_input("Layer", 0, n_layers - 1, key=lkey, placeholder="pick a layer", **first)
        return token, layer
    return widgets


def grade_pick(trace):
    def grade(answer):
        token, layer = answer
        if token is None or layer is None:
            raise EditkitError("pick a cell first: a token and a layer (click the grid or use the inputs)")
        return grading.grade_cell(trace, int(token), int(layer))
    return grade


def step_trace(pack, fid, fact):
    tr = needs(pack, fid, "trace", "causal trace")
    if tr is None:
        return
    hidden = tr["traces"]["hidden"]
    grid, widgets, keys = pick_cell(fid, 2, hidden, "Click the state you think carries the fact")
    ask(pack, fid, 2, f"Noise on the subject's embeddings lowers p({hidden['answer']!r}) from "
                      f"{hidden['high_score']:.3f} to {hidden['low_score']:.3f}. Restoring one clean "
                      "hidden state brings it back: which state, before the last token, brings back "
                      "the most? Click a cell or pick a token and a layer.",
        widgets, grade_pick(hidden), lambda done: show_hidden(hidden, done), above=grid, keys=keys)
    explain(
        "Causal tracing (Meng et al. 2022): a clean run predicts the answer o; a corrupted run adds Gaussian "
        "noise (3 times the standard deviation of the embeddings) to the subject's token embeddings, so the "
        "model loses o; a restored run copies one clean hidden state h_i^(l) (token i after layer l) into "
        "the corrupted run. Each cell's colour is the restored probability, averaged over the noise samples. "
        "On GPT-2 XL, ROME found two sites: the last subject token in early-to-middle layers, where the fact is "
        "recalled, and the last token in late layers, where it is read out (the result says how this fact "
        "compares).",
        [r"\mathrm{IE}(h_i^{(l)}) = P_{*}\big(o \mid \text{clean } h_i^{(l)}\big) - P_{*}(o)"], ["tracing"])
    try_own(2, "the hidden-state trace of your prompt, on one model or two", lambda: trace_inputs(2, fact, pack, True),
            own_traces, show_own_traces, samples=lambda v: v[2].samples * (1 + (v[3] is not None)))


def own_traces(lm, progress, v) -> dict:
    """The hidden-state trace of the student's prompt on the lesson's model and, when picked, on a second one
    ("both": model name -> trace, for the relative-depth view)."""
    prompt, subject, s, other = v
    lms = [lm] + ([other] if other is not None else [])
    runs = [compute.traces(m, prompt, subject, None, s, kinds=("hidden",), sever=False,
                           progress=part(progress, i / len(lms), (i + 1) / len(lms), f"{m.name}: "))
            for i, m in enumerate(lms)]
    return {**runs[0], "both": {m.name: r["traces"]["hidden"] for m, r in zip(lms, runs)} if other else None}


def show_own_traces(r: dict) -> None:
    st.plotly_chart(figs.trace_with_marks(r["traces"]["hidden"]), width="stretch", key="lesson_own_fig_2")
    fast_caption(r["traces"]["hidden"])
    if r.get("both"):
        st.markdown("The same fact on both models, each layer at its **relative depth** l / (L − 1): where does "
                    "restoring the last subject token's state bring back the most of p(answer), "
                    "(p − p\\*) / (p_clean − p\\*)?")
        st.plotly_chart(depth_comparison(r["both"]), width="stretch", key="lesson_own_depth_2")


def trace_inputs(n: int, fact: dict, pack, second: bool = False):
    """(prompt, subject, settings) of the student's trace, plus with `second` the second model picked (or None)."""
    c1, c2, c3 = st.columns([3, 2, 1])
    prompt = c1.text_input("Prompt", fact_prompt(fact), key=f"lesson_own_tprompt_{n}")
    subject = c2.text_input("Subject (in the prompt)", fact["request"]["subject"],
                            key=f"lesson_own_tsubject_{n}")
    samples = c3.number_input("Noise samples", 1, 50, min(5, settings(pack).samples),
                              key=f"lesson_own_samples_{n}")
    other = second_model_picker(pack.model, key=f"lesson_own_model_{n}") if second else None
    if not prompt.strip() or not subject.strip():
        return None
    s = settings(pack)
    out = prompt, subject, compute.Settings(**{**s.to_dict(), "samples": int(samples)})
    return (*out, other) if second else out


def fast_caption(trace: dict) -> None:
    """Under a trace computed in the engine's fast mode (the pack's settings say which are): what it is and its
    measured error."""
    meta = trace.get("meta", {})
    if meta.get("approximation"):
        st.caption(compute.fast_note(meta.get("model") or current_pack().model))


def show_hidden(hidden: dict, done: dict) -> None:
    s = grading.sites(hidden)
    pick = picked_cell(done)
    chart(st, lambda: figs.trace_with_marks(hidden, pick, s["early"]), "lesson_fig_hidden", hidden, pick)
    fast_caption(hidden)
    t, l = s["late"]
    st.markdown(grading.early_site_note(hidden))
    st.caption(f"★ the strongest state before the last token; the last token's own state recovers up to "
               f"{s['late_p']:.3f} at layer {l} (the late site). `*` marks the subject's tokens.")


def step_windows(pack, fid, fact):
    tr = needs(pack, fid, "trace", "causal trace")
    if tr is None:
        return
    sev = tr.get("severing")
    if sev is None:
        st.info("This pack has no severing result for this fact.")
        return
    ask(pack, fid, 3, f"Restore the hidden state at the subject token {sev['token_str']!r} (where "
                      "the hidden-state trace peaks), but freeze the MLPs (or the attention) at that "
                      "token in all later layers in their corrupted state. Do the later MLPs do the "
                      "work?",
        lambda: st.radio("Answer", range(3), format_func=lambda i: grading.SEVER_CHOICES[i],
                         index=None, key=f"lesson_q3_{fid}"),
        lambda c: grading.grade_severing(sev, _chosen(c)),
        lambda done: show_windows(tr, sev, said=done["grade"] is not None),
        keys=[f"lesson_q3_{fid}"])
    explain(
        "Restoring a window of 10 MLP (or attention) outputs at one token, the layers [l − 5, l + 5), shows "
        "which module carries the effect: ROME finds the MLPs at the last subject token in middle layers and "
        "attention at the last token in late layers. Severing restores the hidden state at a subject token "
        "(ROME: the last one; here the one where this trace peaks) while the later MLPs (or attention) at "
        "that token stay corrupted: when the effect collapses with the MLPs frozen, the MLPs did the recall. "
        "On a small model a window of 10 covers many of its layers.",
        [r"\text{MLP window at } l:\ m_i^{(j)} \leftarrow m_{i,\text{clean}}^{(j)},\ "
         r"\max(0, l-5) \le j < \min(L, l+5)"], ["tracing"])
    try_own(3, "MLP and attention windows and severing on your prompt", lambda: trace_inputs(3, fact, pack),
            lambda lm, progress, v: compute.traces(lm, v[0], v[1], None, v[2], kinds=("mlp", "attn"),
                                                   progress=progress),
            show_windows_own, samples=lambda v: v[2].samples)


def show_windows(tr: dict, sev: dict, said: bool = False) -> None:
    """The MLP and attention windows and the severing curves, with their conclusion unless the feedback above
    already `said` it (a graded answer's feedback is that sentence)."""
    cols = st.columns(2)
    for col, kind in zip(cols, ("mlp", "attn")):
        chart(col, lambda kind=kind: figs.trace_with_marks(tr["traces"][kind]), f"lesson_fig_{kind}",
              tr["traces"][kind])
    chart(st, lambda: figs.severing_figure(sev), "lesson_fig_sever", sev)
    fast_caption(tr["traces"]["mlp"])
    if not said:
        st.markdown(grading.severing_conclusion(sev))


def _chosen(c):
    if c is None:
        raise EditkitError("choose an answer first")
    return int(c)


def show_windows_own(r: dict) -> None:
    cols = st.columns(2)
    for col, kind in zip(cols, ("mlp", "attn")):
        col.plotly_chart(figs.trace_with_marks(r["traces"][kind]), width="stretch",
                         key=f"lesson_own_fig_{kind}")
    if r.get("severing"):
        st.plotly_chart(figs.severing_figure(r["severing"]), width="stretch", key="lesson_own_fig_sever")
    fast_caption(r["traces"]["mlp"])


def step_memories(pack, fid, fact):
    view = needs(pack, fid, "memories", "FFN memories")
    if view is None:
        return
    token = view["tokens"][view["position"]]
    k = len(view["memories"][0]["value_tokens"]) if view["memories"] else 0
    done = ask(pack, fid, 4, f"At {token!r}, layer {view['layer']} (where the MLP trace peaks among the "
                             f"subject's tokens), the FFN adds a weighted sum of {view['d_ff']} value "
                             f"vectors. Will the value of one of its {len(view['memories'])} strongest "
                             f"memories put {view['answer']!r} among its top {k} tokens?",
               lambda: st.radio("Answer", ["yes", "no"], index=None, horizontal=True, key=f"lesson_q4_{fid}"),
               lambda c: grading.grade_memories(view, _yes(c)), lambda done: show_memories(view),
               keys=[f"lesson_q4_{fid}"])
    explain(
        "Geva et al. (2021) read an FFN layer as d_ff key-value memories: each key k_i detects a pattern in "
        "the input, the activation gives it a coefficient m_i, and the output is the coefficient-weighted "
        "sum of the values v_i. A value read through the output embedding shows the tokens it promotes (a "
        "negative m_i, red, pushes away from them). The layer's output is usually a composition of many "
        "memories, not a copy of one.",
        [r"\mathrm{FFN}(x) = \sum_{i=1}^{d_{ff}} m_i\, v_i,\quad m = f(x K^{\top}),\quad "
         r"\text{contribution}_i = |m_i|\,\lVert v_i \rVert"], ["memories"])
    try_own(4, "the memories at a token of your prompt", lambda: memory_inputs(pack, fact),
            lambda lm, progress, v: compute.memories(lm, v[0], v[1], v[2], settings(pack)),
            lambda r: show_memories(r, "own"))


def _yes(c) -> bool:
    if c is None:
        raise EditkitError("choose an answer first")
    return c == "yes"


def memory_inputs(pack, fact):
    c1, c2, c3 = st.columns([3, 1, 1])
    prompt = c1.text_input("Prompt", fact_prompt(fact), key="lesson_own_mprompt")
    token = c2.number_input("Token (-1: the last)", -512, 511, -1, key="lesson_own_mtoken")
    layer = c3.number_input("Layer", 0, int(pack.manifest.get("layers", 1)) - 1, 0, key="lesson_own_mlayer")
    return (prompt, int(token), int(layer)) if prompt.strip() else None


def show_memories(view: dict, key: str = "pack") -> None:
    st.markdown(f"Layer {view['layer']} at {view['tokens'][view['position']]!r}: {view['n_active']} of "
                f"{view['d_ff']} memories have m_i > 0 (m from {view['coefficient_min']:.2f} to "
                f"{view['coefficient_max']:.2f}).")
    chart(st, lambda: figs.memories_figure(view), f"lesson_mem_{key}", view if key == "pack" else None)
    st.dataframe(pd.DataFrame([{
        "memory": m["label"], "m_i": round(m["coefficient"], 3), "||v_i||": round(m["value_norm"], 3),
        "value tokens": " · ".join(m.get("value_text", [t["token"] for t in m["value_tokens"]])),
        "Latin-script words (rank)": " · ".join(m.get("latin_text", [])),
        f"has {view['answer']!r}": any(t["token_id"] == view["answer_id"] for t in m["value_tokens"]),
    } for m in view["memories"]]), hide_index=True, width="stretch",
        column_config={"value tokens": st.column_config.TextColumn(width="large"),
                       "Latin-script words (rank)": st.column_config.TextColumn(width="large")})
    st.caption("Tokens as decoded: ␣ is a leading space, � a byte fragment of a longer character. The value "
               "tokens are what the model promotes, often other scripts and word pieces of its 262k-token "
               "vocabulary; the Latin-script column adds each memory's top Latin-script words with their rank "
               "among all tokens. Point at a cell to read it whole.")


def pick_target(fid: str, fact: dict) -> int:
    """The new target the student edits to (kept for steps 5-8 and 11). Kept also under a key of its own: Streamlit
    drops a widget's value after a run that does not draw it, so a step without the picker or another fact reset
    it to the first target (and the answer given for the one picked no longer showed)."""
    targets = fact["targets"]
    key, kept = f"lesson_target_{fid}", f"lesson_target_kept_{fid}"
    if key not in st.session_state:
        st.session_state[key] = st.session_state.get(kept, 0)
    if st.session_state[key] >= len(targets):
        st.session_state[key] = 0
    t = st.selectbox("New target", range(len(targets)), format_func=lambda i: targets[i].strip(), key=key)
    st.session_state[kept] = t
    return t


def edit_of(pack, fid: str, t: int, method: str = "rome"):
    return pack.part(fid, packs.edit_name(t, method))


def step_edit(pack, fid, fact):
    t = pick_target(fid, fact)
    edit = needs(pack, fid, packs.edit_name(t, "rome"), "ROME edit to this target")
    if edit is None:
        return
    pre = edit["probabilities"]["pre"]["rewrite"][0]
    done = ask(pack, fid, 5, f"ROME rewrites one MLP so that {fact['request']['subject']!r} now recalls "
                             f"{edit['target_new'].strip()!r}. Today P({edit['target_new']!r}) = "
                             f"{pre['p_new']:.3f} after the prompt. After the edit it will be:",
               lambda: st.radio("Answer", range(len(grading.BINS)), format_func=lambda i: grading.BINS[i][2],
                                index=None, horizontal=True, key=f"lesson_q5_{fid}_{t}"),
               lambda c: grading.grade_edit(edit, _chosen(c)), lambda done: show_edit({"rome": edit}), target=t,
               keys=[f"lesson_q5_{fid}_{t}"])
    explain(
        "ROME (Meng et al. 2022) treats the edited MLP's output matrix W as a linear associative memory: the "
        "key k* (the MLP activation at the subject's last token, averaged over random prefixes) should give "
        "a new value v* (optimised so that the model predicts the new object, with a KL term keeping "
        "“{subject} is a” unchanged). Of all matrices with Ŵk* = v* it takes the one that changes W least "
        "on the keys it already stores (their second moment C): a rank-one update, here of layer "
        f"{', '.join(map(str, edit['layers']))}.",
        [r"\hat W = W + \Lambda\,(C^{-1} k_*)^{\top},\qquad \Lambda = \frac{v_* - W k_*}{(C^{-1} "
         r"k_*)^{\top} k_*}"],
        ["rome"])
    try_own(5, "a ROME edit of your own fact", lambda: own_request(5, fact),
            lambda lm, progress, rec: {"rome": compute.edit(lm, "rome", rec, settings(pack), progress)[0]},
            lambda r: show_edit(r, "own"))


def show_edit(edits: dict, key: str = "pack") -> None:
    st.caption(figs.BARS_KEY)
    cols = st.columns(3)
    first = next(iter(edits.values()))
    for col, group in zip(cols, ("rewrite", "paraphrase", "neighborhood")):
        if not first["probabilities"]["pre"][group]:
            col.caption(f"no {group} prompts")
            continue
        chart(col, lambda group=group: figs.edits_figure(edits, group), f"lesson_edit_{group}_{key}",
              first if key == "pack" else None, group, *edits)
        col.caption(figs.edit_prompts(edits, group))
    for e in edits.values():
        g = e["greedy"]
        before, after = g["pre"]["rewrite"][0], g["post"]["rewrite"][0]
        st.markdown(f"**{e['label']}**, greedy continuation of “{ui.md_escape(e['rewrite'])}”  \n"
                    f"before: …{ui.md_escape(figs.compact(before))}  \nafter: …"
                    f"{ui.md_escape(figs.compact(after))}")
        note = figs.special_token_note(before, after)
        if note:
            st.caption(ui.md_escape(note))


def step_retrace(pack, fid, fact):
    t = pick_target(fid, fact)
    edit = needs(pack, fid, packs.edit_name(t, "rome"), "ROME edit to this target")
    trace = needs(pack, fid, packs.retrace_name(t, "rome"), "re-trace of the edited model")
    if edit is None or trace is None:
        return
    grid, widgets, keys = pick_cell(fid, 6, trace, f"Click the state you think carries {trace['answer']!r} now")
    ask(pack, fid, 6, f"The edited model says {trace['answer']!r} (p = {trace['high_score']:.3f}). "
                      f"Traced again with {trace['answer']!r} as the answer: which state, before the "
                      "last token, carries the new fact now? ROME edited layer "
                      f"{', '.join(map(str, edit['layers']))}.",
        widgets, grade_pick(trace), lambda done: show_retrace(pack, fid, t, trace, done), target=t, above=grid,
        keys=keys)
    explain(
        "The edited model traced again, with the new target o* as the answer. A restored state brings P(o*) "
        "back when the new association is in it or computed from it: the clean state of the subject's last "
        "token reaches the edited MLP, which now writes v*, and later layers carry it to the last token. "
        "Compare with step 2, where the same trace found the old fact.",
        [r"\mathrm{IE}^{*}(h_i^{(l)}) = P^{\text{edited}}_{*}\big(o^* \mid \text{clean } h_i^{(l)}\big) "
         r"- P^{\text{edited}}_{*}(o^*)"], ["rome"])
    try_own(6, "edit your own fact and trace the edited model", lambda: own_request(6, fact),
            lambda lm, progress, rec: own_retrace(lm, progress, rec, settings(pack)),
            lambda r: st.plotly_chart(figs.retrace_figure(r["trace"], "ROME", r["layers"]), width="stretch",
                                      key="lesson_own_fig_6"))


def show_retrace(pack, fid: str, t: int, trace: dict, done: dict) -> None:
    """The ROME-edited model's trace with the student's pick, the other methods' beside it (three to a row), and
    where each method's new fact is carried most."""
    pick = picked_cell(done)
    chart(st, lambda: figs.trace_with_marks(trace, pick, grading.sites(trace)["early"]),
          "lesson_fig_retrace", trace, pick)
    fast_caption(trace)
    first = (pack.part(fid, "trace") or {}).get("traces", {}).get("hidden", {}).get("samples")
    if first and trace.get("samples", first) < first:
        st.caption(f"Re-traced with {trace['samples']} noise samples, the first {trace['samples']} of the "
                   f"{first} in step 2's trace: a noisier map, which on the shipped facts finds the early site "
                   "of a much longer trace about as often as a re-trace of 10 samples does (the manual's Speed "
                   "page).")
    others = [(m, pack.part(fid, packs.retrace_name(t, m)), pack.part(fid, packs.edit_name(t, m)))
              for m in pack.manifest.get("method_names", []) if m != "rome"]
    others = [o for o in others if o[1] and o[2]]
    if others:
        st.markdown("The same trace after the other methods' edits (their edited layers dotted):")
        for row in range(0, len(others), 3):
            for col, (m, r, e) in zip(st.columns(3), others[row:row + 3]):
                chart(col, lambda r=r, e=e: figs.retrace_figure(r, e["label"], e["layers"]),
                      f"lesson_fig_retrace_{m}", r)
    edit = pack.part(fid, packs.edit_name(t, "rome"))
    st.markdown(grading.retrace_conclusion({edit["label"]: trace, **{e["label"]: r for _, r, e in others}}))


def own_retrace(lm, progress, record, s) -> dict:
    edit, delta = compute.edit(lm, "rome", record, s, part(progress, 0, 0.6, "edit: "))
    small = compute.Settings(**{**s.to_dict(), "retrace_samples": min(s.retrace_samples or s.samples, 5)})
    return {"trace": compute.retrace(lm, record, delta, small, part(progress, 0.6, 1, "trace: ")),
            "layers": edit["layers"]}


def step_bleed(pack, fid, fact):
    t = pick_target(fid, fact)
    bleed = needs(pack, fid, packs.bleed_name(t), "bleed map for this target")
    if bleed is None:
        return
    rows = grading.neighbours(bleed)
    new = bleed["request"]["target_new"].strip()
    done = ask(pack, fid, 7, f"ROME makes {fact['request']['subject']!r} recall {new!r}. Which of these "
                             f"prompts about other subjects will move toward {new!r} (P({new!r}) up by at "
                             f"least {100 * grading.MOVE:.0f} percentage point)?",
               lambda: st.multiselect("They will move", [r["prompt"] for r in rows],
                                      key=f"lesson_q7_{fid}_{t}"),
               lambda picked: grading.grade_neighbours(bleed, picked or []), lambda done: show_bleed(bleed),
               target=t, keys=[f"lesson_q7_{fid}_{t}"])
    explain(
        "An edit changes W by ΔW, so wherever the layer's input key is k the output changes by exactly ΔW k. "
        "For ROME's rank-one update that change is the edited subject's own change scaled by a share s(k): a "
        "neighbour whose key looks like the subject's to C⁻¹ is pushed toward the new target as hard. "
        "Specificity counts the neighbours (other subjects, same relation) that still prefer their true "
        "answer.",
        [r"\Delta W k = s(k)\,(v_* - W k_*),\qquad s(k) = \frac{(C^{-1}k_*)^\top k}{(C^{-1}k_*)^\top k_*}",
         r"\text{Specificity} = \mathbb{E}_{x \in \text{neighbours}}\,\mathbb{1}\big[P(o_c \mid x) > P(o_* "
         r"\mid x)\big]"],
        ["metrics"])
    try_own(7, "the bleed map of your own edit", lambda: own_request(7, fact, neighbours=True),
            lambda lm, progress, rec: compute.bleed(lm, rec, settings(pack), progress=progress),
            lambda r: show_bleed(r, "own"),
            facts=settings(pack).bleed_facts)


def show_bleed(bleed: dict, key: str = "pack") -> None:
    chart(st, lambda: figs.bleed_figure(bleed), f"lesson_bleed_{key}", bleed if key == "pack" else None)
    st.dataframe(pd.DataFrame([{"source": r["source"], "prompt": r["prompt"], "share s": round(r["share"], 3),
                                "at token": r["token"], "P(new) before": round(r["p_new_before"], 4),
                                "P(new) after": round(r["p_new_after"], 4), "moved": grading.moved(r)}
                               for r in bleed["rows"]]), hide_index=True, width="stretch")


def step_methods(pack, fid, fact):
    t = pick_target(fid, fact)
    edits = {m: edit_of(pack, fid, t, m) for m in pack.manifest.get("method_names", [])}
    edits = {m: e for m, e in edits.items() if e}
    if not edits:
        needs(pack, fid, packs.edit_name(t, "rome"), "edits to this target")
        return
    labels = {m: e["label"] for m, e in edits.items()}
    new = next(iter(edits.values()))["target_new"]
    done = ask(pack, fid, 8, f"Each method edits the same fact to {new.strip()!r} on the same weights. Asked "
                             "to continue the prompt (greedy decoding), which edited models will *say* "
                             f"{new.strip()!r}?",
               lambda: st.multiselect("They will say it", list(edits), format_func=labels.get,
                                      key=f"lesson_q8_{fid}_{t}"),
               lambda picked: grading.grade_generation(edits, picked or []), lambda done: show_methods(edits),
               target=t, keys=[f"lesson_q8_{fid}_{t}"])
    methods = compute.methods()  # every registered method, also one added after the pack was built
    st.markdown("\n".join(f"- **{m['label']}**: {ui.md_escape(m['about'])}"
                           + ("" if m["name"] in edits else " *(not in this pack: run it in “try your own”; a "
                              "pack rebuilt with `lesson build` computes it)*") for m in methods))
    explain(
        "MEMIT spreads the change over several layers with a least-squares solve that keeps the other keys' "
        "outputs, layer l taking 1/(L − l + 1) of what is still missing; PMET optimises attention and FFN "
        "targets together, writes only the FFN and spreads with a square root; AlphaEdit projects the update "
        "onto the null space P of the key statistics, so ordinary keys barely move; UltraEdit needs no "
        "statistics and no target optimisation: one ridge solve from the edited layers' keys and gradients, "
        "standardised with running statistics carried from edit to edit. Teacher-forced efficacy "
        "asks whether P(new) > P(true) after the prompt; generation-based success asks whether the greedy "
        "continuation says the new target and no longer the old one (QAEdit: 38.5% real generation success "
        "against 96.8% teacher-forced in their setting).",
        [r"\text{MEMIT: } \Delta = R K^{\top}(\lambda C + K K^{\top})^{-1},\quad R^{l} = \frac{V - "
         r"W_0^{l}K^{l}}{L - l + 1}\qquad \text{PMET: } R^{l} = \frac{V - W_0^{l}K^{l}}{\sqrt{L - l + 1}}",
         r"\text{AlphaEdit: } \Delta = R K_1^{\top} P\,(K_p K_p^{\top} P + K_1 K_1^{\top} P + \alpha I)^{-1}",
         r"\text{UltraEdit: } \Delta = (\hat K^{\top}\hat K + \lambda I)^{-1}\hat K^{\top} V,\quad "
         r"V = -\eta\,\lVert \hat k\rVert^2\,\hat g",
         r"\text{efficacy} = \mathbb{1}\big[P(o_*) > P(o_c)\big],\quad \text{generation success} = "
         r"\mathbb{1}\big[o_* \in \mathrm{greedy}(x) \wedge o_c \notin \mathrm{greedy}(x)\big]"],
        ["memit", "pmet", "metrics"])
    try_own(8, "every method on your own fact", lambda: own_request(8, fact),
            lambda lm, progress, rec: own_methods(lm, progress, rec, pack), show_methods_own)


def own_methods(lm, progress, record, pack) -> dict:
    names = [m["name"] for m in compute.methods()]  # every registered method
    n = len(names)
    return {m: compute.edit(lm, m, record, settings(pack), part(progress, i / n, (i + 1) / n, f"{m}: "))[0]
            for i, m in enumerate(names)}


def show_methods(edits: dict, key: str = "pack") -> None:
    """The methods side by side: the conclusion, the table (one column per method, so it fits the page), the
    charts and the continuations."""
    st.markdown(grading.methods_conclusion(edits))
    st.dataframe(pd.DataFrame(figs.by_column(figs.methods_table(edits))), hide_index=True, width="stretch")
    show_edit(edits, key)


def show_methods_own(edits: dict) -> None:
    show_methods(edits, "own")


def step_sweep(pack, fid, fact):
    sweep = needs(pack, fid, "sweep", "layer sweep")
    tr = pack.part(fid, "trace")
    if sweep is None:
        return
    peak = sweep.get("peak_layer")
    new = sweep["request"]["target_new"].strip()
    token = (sweep.get("trace") or {}).get("token", "the subject")
    ask(pack, fid, 9, f"The MLP trace at {token!r} peaks at layer {peak}. ROME edited "
                      f"the fact to {new!r} at every layer, one at a time. Is the traced layer "
                      "(within one layer) the one where the edit works best?",
        lambda: st.radio("Answer", range(len(grading.SWEEP_CHOICES)), format_func=grading.SWEEP_CHOICES.__getitem__,
                         index=None, key=f"lesson_q9_{fid}"),
        lambda c: grading.grade_sweep(sweep, _chosen(c)),
        lambda done: show_sweep(sweep, (tr or {}).get("traces", {}).get("mlp"), said=done["grade"] is not None),
        keys=[f"lesson_q9_{fid}"])
    explain(
        "ROME edits the layer where tracing finds the MLP effect. Hase et al. (2023) edited every layer "
        "instead and found that editing success barely correlates with where tracing localises the fact: the "
        "best layer to edit is often not the traced peak. The lower chart shows, per edited layer, P(new) − "
        "P(true) on the prompt and a paraphrase (higher: the edit works) and P(true) − P(new) on neighbours "
        "(higher: nothing leaked); the best layer has the largest sum of the three. Those margins are measured on "
        "a handful of prompts: a layer whose sum differs from the best by less than the spread over the prompts "
        "(1.96 standard errors of the paired differences) is within noise of it.",
        [r"\text{rewrite score} = \frac{P_{\text{post}}(o^*) - P_{\text{pre}}(o^*)}{1 - "
         r"P_{\text{pre}}(o^*)}"])
    try_own(9, "ROME at several layers on your own fact", lambda: sweep_inputs(pack, fact),
            lambda lm, progress, v: compute.layer_sweep(lm, v[0], None, settings(pack), v[1], progress),
            lambda r: show_sweep(r, None, "own"), samples=settings(pack).samples)


def sweep_inputs(pack, fact):
    rec = own_request(9, fact)
    layers = st.text_input("Layers ('all', '2,4,6' or '0-5'; each edit takes seconds to a minute)", "0-5",
                           key="lesson_own_layers_9")
    return (rec, layers) if rec is not None and layers.strip() else None


def show_sweep(sweep: dict, mlp_trace, key: str = "pack", said: bool = False) -> None:
    """The sweep's conclusion (unless the feedback above already `said` it), its figure and table."""
    if not said:
        st.markdown(grading.sweep_conclusion(sweep))
    chart(st, lambda: figs.sweep_figure(sweep, mlp_trace), f"lesson_sweep_{key}",
          sweep if key == "pack" else None)
    st.dataframe(pd.DataFrame([{"layer": r["layer"], "efficacy margin": r["efficacy_magnitude"],
                                "generalization margin": r["generalization_magnitude"],
                                "specificity margin": r["specificity_magnitude"],
                                "rewrite score": r["rewrite_score"]} for r in sweep["rows"]]),
                 hide_index=True, width="stretch")


def step_lifelong(pack, fid, fact):
    with ui.guard("the shipped lifelong run"):
        shipped = _lifelong()
        results = shipped["results"]
        first = next(iter(results.values()))
        labels = [r.get("label", m) for m, r in results.items()] + [grading.NONE]
        done = ask(pack, fid, 10, f"editkit applied {first.get('n', 500)} CounterFact edits to "
                                  f"{first['model']}, one batch after another (ROME one at a time, the "
                                  "others in batches of 25). Which method collapses first?",
                   lambda: st.radio("Answer", labels, index=None, horizontal=True, key=f"lesson_q10_{fid}"),
                   lambda c: grading.grade_lifelong(results, _picked(c)),
                   lambda done: show_lifelong(shipped, pack, said=done["grade"] is not None),
                   keys=[f"lesson_q10_{fid}"])
    explain(
        "Lifelong editing applies edits one batch after another, each computed on the weights the earlier "
        "ones left. Checkpoints every 100 edits measure the edits so far (a fixed sample of 50 of them, all "
        "at the last), WikiText perplexity and ‖ΔW‖; a run counts as collapsed when perplexity passes twice "
        "the unedited model's or fewer than half of the earlier successful edits still hold. Sequential ROME "
        "edits degrade a model (Gupta et al. 2024); "
        "AlphaEdit's null-space projection is meant to keep what the earlier edits and the model already "
        "stored.",
        [r"W_t = W_0 + \Delta W_1 + \dots + \Delta W_t,\qquad \text{collapse: } "
         r"\mathrm{PPL}(W_t) > 2\,\mathrm{PPL}(W_0)"], ["references"])
    try_own(10, "a short lifelong run of your own", lifelong_inputs,
            lambda lm, progress, v: compute.lifelong_run(lm, v[0], v[1], v[2], progress),
            lambda r: (st.markdown(grading.lifelong_conclusion(r["results"])),
                       st.plotly_chart(figs.lifelong_figure(r["results"]), width="stretch", key="lesson_own_fig_10")),
            sequential=lambda v: v[1])


def show_lifelong(shipped: dict, pack, said: bool = False) -> None:
    """The lifelong runs' conclusion (unless the feedback above already `said` it), curves and table."""
    results = shipped["results"]
    first = next(iter(results.values()))
    if not said:
        st.markdown(grading.lifelong_conclusion(results))
    chart(st, lambda: figs.lifelong_figure(results), "lesson_fig_lifelong", results)
    st.caption("Hollow markers: checkpoints measured on a fixed random sample of the edits so far; filled: on all "
               "of them.")
    st.dataframe(pd.DataFrame(figs.by_column(shipped["table"], "label")), hide_index=True, width="stretch")
    if first["model"] != pack.model:
        st.caption(f"This run is editkit's on {first['model']}; the pack's model is {pack.model}.")


def _picked(c):
    if c is None:
        raise EditkitError("choose an answer first")
    return c


@st.cache_resource(show_spinner=False)
def _lifelong() -> dict:
    return compute.lifelong()


def lifelong_inputs():
    names = [m["name"] for m in compute.methods()]
    labels = {m["name"]: m["label"] for m in compute.methods()}
    c1, c2, c3 = st.columns(3)
    chosen = c1.multiselect("Methods", names, ["rome", "memit"] if "memit" in names else names[:1],
                            format_func=labels.get, key="lesson_own_life_methods")
    n = c2.number_input("Edits", 2, 200, 10, key="lesson_own_life_n")
    batch = c3.number_input("Batch size (ROME: 1)", 1, 50, 5, key="lesson_own_life_batch")
    return (chosen, int(n), int(batch)) if chosen else None


def step_ripple(pack, fid, fact):
    from editkit.figures.ripple import ripple_figure

    t = pick_target(fid, fact)
    out = needs(pack, fid, packs.ripple_name(t), "ripple effects for this target")
    rows = grading.ripple_rows(out) if out else []
    if out and not rows:
        st.info(out["message"])
    elif out:
        new = out["request"]["target_new"].strip()
        label = {r["prompt"]: f"{r['prompt']} {'→' if r['move'] else '='} {r['answer'].strip()}" for r in rows}
        def show(done):
            chart(st, lambda: ripple_figure(out), f"lesson_ripple_{t}", out)
            st.markdown(f"**{ui.md_escape(grading.ripple_conclusion(out))}**")

        ask(pack, fid, 11, f"ROME makes {fact['request']['subject']!r} recall {new!r}. After the edit, "
                           "which prompts give their expected answer (→: the edit should move it there; =: "
                           "it should stay)?",
            lambda: st.multiselect("They will give their expected answer", list(label), format_func=label.get,
                                   key=f"lesson_q11_{fid}_{t}"),
            lambda picked: grading.grade_ripple(out, picked or []), show, target=t, keys=[f"lesson_q11_{fid}_{t}"])
    explain(
        "An edit (s, r, o → o*) implies more than its own prompt: composed with what the model knows about o* "
        "(o* lies in country z*) it says s lies in z*; another name of s should follow; s's other facts and o's "
        "own facts should stay. editkit derives these from the model's own answers and keeps those it knows. "
        "RippleEdits and MQuAKE found that weight edits pass the edited prompt and fail most implied facts, "
        "while writing the new fact in the prompt (the in-context reference) propagates better.",
        [r"(s, r, o^*) \wedge (o^*, r_2, z^*) \Rightarrow (s,\ r \circ r_2,\ z^*)"], ["references"])
    try_own(11, "ripple effects of a ROME edit of your own fact", lambda: own_request(11, fact),
            lambda lm, progress, rec: compute.ripple(lm, rec, progress=progress), show_ripple_own)


def show_ripple_own(out: dict) -> None:
    """A student's own ripple result: the grid and its conclusion, or why no implied fact could be tested."""
    from editkit.figures.ripple import ripple_figure

    if not grading.ripple_rows(out):
        st.info(out["message"])
        return
    chart(st, lambda: ripple_figure(out), "lesson_ripple_own", None)
    st.markdown(f"**{ui.md_escape(grading.ripple_conclusion(out))}**")


RUN = {1: step_lens, 2: step_trace, 3: step_windows, 4: step_memories, 5: step_edit, 6: step_retrace,
       7: step_bleed, 8: step_methods, 9: step_sweep, 10: step_lifelong, 11: step_ripple}


# --- teacher mode -------------------------------------------------------------------------------------------
def is_teacher() -> bool:
    """With a teacher passphrase set (settings teacher.passphrase or EDITKIT_TEACHER_PASSPHRASE), the passphrase
    typed in the sidebar; without one, ?teacher=1 from a browser on the server's own machine only (a laptop of
    one's own); from another machine it is refused with the setting to set."""
    conf = server_settings()
    secret = conf.teacher_passphrase
    if secret:
        typed = st.sidebar.text_input("Teacher passphrase", type="password", key="lesson_teacher_pass")
        if typed and not hmac.compare_digest(typed.encode(), secret.encode()):
            st.sidebar.warning(f"That is not the teacher passphrase ({conf.cite('teacher.passphrase')}).")
            return False
        return bool(typed)
    if st.query_params.get("teacher") != "1":
        return False
    who = ui.visitor()
    if who.local:
        return True
    st.sidebar.warning(f"Teacher mode from {who.describe()} needs a passphrase, and this server has none "
                       f"({conf.cite('teacher.passphrase')}); the teacher sets one, or opens this page on the "
                       "server's own machine.")
    return False


def teacher_view(pack) -> None:
    st.divider()
    st.header("Teacher")
    st.subheader("The class's answers")
    store = class_store()
    rows = store.summary(lesson_id(pack))
    by_fact: dict = {}
    for r in rows:  # one table per fact: a fact column beside the step and the answers pushed them off-screen
        by_fact.setdefault(where_label(pack, r["fact"]), []).append(r)
    for i, (fact, group) in enumerate(by_fact.items()):
        st.markdown(f"**{ui.md_escape(fact)}**")
        st.dataframe(pd.DataFrame([{
            "step": f"{r['step']}. {STEPS.get(int(r['step']), '')}", "students": r["students"],
            "right": r["right"], "close": r["close"], "wrong": r["wrong"],
            "first answers right / close / wrong": "{right} / {close} / {wrong}".format(**r["first"]),
            "mean score": round(r["mean_score"], 2) if r["mean_score"] is not None else None,
            "answers (most frequent first)": "; ".join(f"{a} ({n})"
                                                       for a, n in list(r["answers"].items())[:4]),
        } for r in group]), hide_index=True, width="stretch", key=f"lesson_class_answers_{i}")
    if rows:
        st.caption("Right / close / wrong count each student's latest answer; the first answers are their "
                   "predictions before any feedback ('Answer again' replaces the latest, never the first).")
    else:
        st.caption("No answers yet. Each student's answers are counted here, anonymously, as they check "
                   "them.")
    m = pack.manifest
    st.caption(f"Stored in {store.path} (SQLite), for this class: the answers stay when facts are added or "
               f"dropped. The pack: {pack.folder}, computed by editkit {m.get('editkit_version')} on "
               f"{m['model']} (weights digest {m['fingerprint']}).")
    confirm = st.checkbox("Yes, delete this lesson's answers", key="lesson_clear_confirm")
    if st.button("Clear the class's answers", key="lesson_clear", disabled=not confirm):
        n = store.clear(lesson_id(pack))
        st.session_state.pop("lesson_clear_confirm", None)
        st.success(f"Cleared {n} answer(s).")
    add_fact_form(pack)


def where_label(pack, where: str) -> str:
    """A stored answer's fact ("<fact id>" or "<fact id> → <new target>") as the teacher reads it."""
    fid, _, target = where.partition(TARGET_SEP)
    fact = pack.fact(fid) if fid in pack.fact_ids else None
    name = fact_label(fact) if fact else f"a fact no longer in the pack ({fid.rsplit('-', 1)[0].replace('-', ' ')})"
    return f"{name}, edited to {target}" if target else name


def duration(seconds: float) -> str:
    """'40 s' or '23 min' (a small pack's fact takes seconds: '0 min' read as nothing to wait for)."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{math.ceil(seconds / 60)} min"


def _add_cancelled() -> None:
    st.session_state["lesson_add_cancelled"] = True


def add_fact_form(pack) -> None:
    from editkit.lesson.build import estimate

    st.subheader("Add a fact")
    new = compute.Settings.for_new_facts(pack.manifest.get("settings"))
    one, how = estimate(pack, 1, new)
    two, _ = estimate(pack, 2, new)
    st.markdown("The same computation as `python -m editkit lesson build`, as a job on this server: about "
                f"{duration(one)} for a fact with one new target, {duration(two)} with two ({how}; longer while "
                "other jobs compute, and on a server that has never computed the model's statistics the first fact "
                "computes them too). Students see the fact once every part of it is computed; until then, and if "
                "the job is cancelled, they are served the pack as it was.")
    added = st.session_state.pop("lesson_added", None)
    if added:
        st.success(added)
    adding = st.session_state.pop("lesson_adding", None)  # (the fact's key, the pack's facts before the job)
    if st.session_state.pop("lesson_add_cancelled", False):
        done = [f for f in pack.fact_ids if adding and f not in adding[1] and pack.fact(f).get("key") == adding[0]]
        if done:  # the click came after the last part: the build had already published the fact
            st.success(f"The cancel came too late: every part of “{fact_label(pack.fact(done[0]))}” was already "
                       "computed, so it is added, and every student now sees it in the fact list.")
        else:
            st.info("Adding the fact was cancelled: the students' pack is unchanged (the fact is not in it). The "
                    "parts computed so far are kept, so adding the same fact again continues where it stopped.")
    with st.form("lesson_add_form"):
        c1, c2 = st.columns(2)
        prompt = c1.text_input("Prompt with {} for the subject", "{} is located in the city of",
                               key="lesson_add_prompt")
        subject = c2.text_input("Subject", key="lesson_add_subject")
        c3, c4 = st.columns(2)
        true = c3.text_input("True target (the model must predict it)", key="lesson_add_true")
        targets = c4.text_input("New targets (comma-separated)", key="lesson_add_targets")
        para = st.text_area("Paraphrase prompts (one per line)", key="lesson_add_para")
        neigh = st.text_area(NEIGHBOURS_LABEL + " (one per line)", key="lesson_add_neigh", help=NEIGHBOURS_HELP)
        go = st.form_submit_button("Add the fact", type="primary")
    if go:
        with ui.guard("adding the fact"):
            news = [t.strip() for t in targets.split(",") if t.strip()]
            if not news:
                raise EditkitError("give at least one new target")
            record = {"prompt": prompt, "subject": subject, "target_true": true, "target_new": news[0],
                      "lesson_targets": news[1:], "paraphrase_prompts": _lines(para),
                      "neighborhood_prompts": _lines(neigh)}
            from editkit.lesson.build import build
            from editkit.lesson.facts import read_facts

            [new_fact] = read_facts([record])  # a bad record is refused before anything loads
            st.session_state["lesson_adding"] = (new_fact.key, list(pack.fact_ids))  # for a cancel's message
            lm = ui.get_lm(pack.model, served=True)
            folder = packs.writable_folder()
            out = ui.run_job("adding a fact to the lesson", lambda progress: build(
                [record], folder, lm=lm, progress=progress, methods=pack.manifest.get("method_names"),
                settings=new), on_cancel=_add_cancelled, samples=new.samples,
                memory=compute.build_memory(lm, new, pack.manifest.get("method_names")),
                niceness=0)  # the teacher waits on it while preparing: normal priority, not starved by other work
            fact = packs.Pack.open(folder).fact(out["facts"][-1])
            st.session_state["lesson_added"] = (f"Added “{fact_label(fact)}” ({out['computed']} part(s) computed "
                                                f"in {duration(out['seconds'])}). Every student now sees it in "
                                                "the fact list.")
            st.rerun()  # the sidebar's fact list shows it
    if packs.served_folder() == packs.class_copy():
        if st.button("Back to the shipped pack (drop the added facts; the class's answers stay)",
                     key="lesson_reset_pack"):
            packs.reset_class_copy()
            st.rerun()


# --- the page -----------------------------------------------------------------------------------------------
def sidebar(pack) -> tuple[str | None, object]:
    with st.sidebar:
        st.markdown("### Lesson pack")
        m = pack.manifest
        n = len(pack.fact_ids)
        st.caption(f"{n} fact{'s' if n != 1 else ''} on **{m['model']}**, computed once when the pack was built"
                   f"{packs.built_on(m)}: every step shows these results without computing.")
        ids = pack.fact_ids
        if not ids:
            return None, None
        if st.session_state.get("lesson_fact") not in ids:
            st.session_state.pop("lesson_fact", None)  # a pack without that fact (another pack served)
        fid = st.selectbox("Fact", ids, format_func=lambda f: fact_short(pack.fact(f)), key="lesson_fact",
                           help="Subject → the answer the model gives; the whole fact heads every step.")
        return fid, st.container()  # the answers are drawn after the step (which may add one)


def my_answers(where) -> None:
    """The student's answers so far, with the downloads (sidebar)."""
    with where:
        mine = [a["row"] for a in answers().values() if a.get("row")]
        st.markdown(f"### Your answers ({len(mine)})")
        if mine:
            right = sum(r["verdict"] == "right" for r in mine)
            st.caption(f"{right} right, {sum(r['verdict'] == 'close' for r in mine)} close, "
                       f"{sum(r['verdict'] == 'wrong' for r in mine)} wrong.")
            c1, c2 = st.columns(2)
            c1.download_button("CSV", classroom.to_csv(mine), "my-lesson-answers.csv", "text/csv",
                               key="lesson_dl_csv")
            c2.download_button("JSON", classroom.to_json(mine), "my-lesson-answers.json", "application/json",
                               key="lesson_dl_json")


def step_title(pack, step: int, fact: dict | None = None) -> str:
    """A step's heading; step 8 names the methods the pack was built with (the registry may hold more: the
    heading listed six methods above a table of the pack's four); step 11 names the fact's subject (its generic
    title named the Eiffel Tower above every fact)."""
    labels = [m["label"] for m in pack.manifest.get("methods", [])]
    if step == 8 and labels:
        return f"{', '.join(labels[:-1])} and {labels[-1]} side by side" if len(labels) > 1 else \
            f"{labels[0]} on its own"
    subject = ((fact or {}).get("request") or {}).get("subject")
    if step == 11 and subject:
        subject = "the" + subject[3:] if subject.startswith("The ") else subject
        return f"Which of {ui.md_escape(subject)}'s facts follow the edit? Ripple effects"
    return STEPS[step]


def _go(delta: int) -> None:
    st.session_state["lesson_step"] = min(max(st.session_state.get("lesson_step", 1) + delta, 1), len(STEPS))


def main() -> None:
    try:
        pack = current_pack()
    except EditkitError as exc:
        st.error(f"No lesson pack to serve: {exc}")
        st.stop()
    fid, answers_box = sidebar(pack)
    teacher = is_teacher()
    if fid is None:
        st.info("This pack has no facts yet.")
    else:
        fact = pack.fact(fid)
        if st.session_state.get("lesson_step", 1) == 1:
            draw(reference.intro(pack_methods(pack)))
        true = fact["request"]["target_true"].strip()
        st.markdown(f"**The fact:** “{ui.md_escape(fact_prompt(fact))}” → **{ui.md_escape(true)}** "
                    f"({pack.model} predicts it with p = {fact['known']['predicted'][0]['prob']:.2f}).")
        step = st.radio("Step", list(STEPS), format_func=lambda n: f"{n}", horizontal=True, key="lesson_step")
        st.header(f"Step {step}. {step_title(pack, step, fact)}")
        with ui.guard(f"step {step}"):
            RUN[step](pack, fid, fact)
        c1, c2, _ = st.columns([1, 1, 6])
        c1.button("← Previous", key="lesson_prev", on_click=_go, args=(-1,), disabled=step == 1)
        c2.button("Next →", key="lesson_next", on_click=_go, args=(1,), disabled=step == len(STEPS))
        my_answers(answers_box)
    if teacher:
        with ui.guard("teacher view"):
            teacher_view(pack)


main()
