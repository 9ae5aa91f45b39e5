# Over 450 lines: every lesson step's computation, one short function per step.
"""Every computation of the lesson, and the only module of editkit/lesson/ that calls the rest of the library.
(Over 450 lines: it is that one door, a section per step, so that a change of the library's names ends here.)

Each function computes one step's result for one fact (or the student's own prompt) and returns it as plain JSON
data: the builder stores exactly these dicts in a pack, the Lesson page draws them, and "try your own" runs the
same function live. When the library's names change (tracing, editing, evaluation), only this file follows.

    lens(lm, prompt, answer)                  step 1: next-token prediction and logit lens
    traces(lm, prompt, subject, answer, s)    steps 2-3: the hidden / MLP / attention heatmaps and severing
    memories(lm, prompt, subject, mlp, s)     step 4: FFN memories at the traced peak
    edit(lm, method, record, s)               steps 5 and 8: an edit measured before and after (+ its delta)
    retrace(lm, record, delta, s)             step 6: the edited model's hidden-state trace for the new target
    bleed(lm, record, s)                      step 7: the ROME edit's bleed map
    layer_sweep(lm, record, mlp, s)           step 9: ROME at every layer beside the trace (Hase et al. 2023)
    lifelong()                                step 10: the shipped lifelong-editing run
    ripple(lm, record)                        step 11: the implied facts before and after ROME and in context
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace

KINDS = ("hidden", "mlp", "attn")


@dataclass(frozen=True)
class Settings:
    """How a pack's results are computed (stored in its manifest; a rerun with other settings is refused)."""

    samples: int = 10  # noise samples per causal trace (ROME's default)
    noise: str = "3s"  # 3 x the embeddings' standard deviation (ROME)
    window: int = 10  # MLP / attention restoration window (ROME)
    seed: int = 1
    lens_k: int = 10  # tokens per layer in the logit lens
    memories_top: int = 10  # memories shown at the traced peak
    greedy_tokens: int = 20  # greedy continuation of the rewrite / paraphrase prompts, before and after
    bleed_facts: int = 12  # known facts of the same relation in the bleed map
    sweep_layers: str = "all"  # layers of the layer sweep
    # the fact's traces (steps 2-4) and the re-traces of the edited models (step 6): "bfloat16" is the tracing
    # engine's fast mode, an approximation whose largest score difference from the exact engine is measured
    # (tracing/bench.py) and shown beside them; chosen against the traces' own noise (benchmarks/lesson_noise.py).
    # On a machine without fast bf16 matmuls (an AVX2-only CPU) the exact engine runs instead (traces())
    trace_precision: str = "bfloat16"
    retrace_precision: str = "bfloat16"
    retrace_samples: int | None = 5  # noise samples of the re-traces, at most `samples`; None: `samples`

    def __post_init__(self):  # the re-traces take the first of the fact's draws: never more than it has
        if self.retrace_samples and self.retrace_samples > self.samples:
            object.__setattr__(self, "retrace_samples", self.samples)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Settings":
        """The settings a pack (or a fact) records; a field added after it was built has the value it was built
        with (LEGACY), not today's default."""
        names = set(cls.__dataclass_fields__)
        return cls(**{**LEGACY, **{k: v for k, v in (d or {}).items() if k in names}})

    @classmethod
    def for_new_facts(cls, d: dict) -> "Settings":
        """A pack's settings for the facts added to it now: the recorded ones, today's defaults for the fields
        added since it was built."""
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in (d or {}).items() if k in names})


LEGACY = {"retrace_precision": "float32", "trace_precision": "float32",  # what packs built before a setting
          "retrace_samples": None}  # existed computed with


def rounded(value, digits: int = 6):
    """JSON data with floats rounded (a pack stays small) and NaN / inf as None."""
    if isinstance(value, float):
        return round(value, digits) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value


# --- models, records, methods -----------------------------------------------------------------------------------
def load(name: str, progress=None):
    """The model `name` (embedded, tiny, hub id or folder)."""
    from ..model.loading import load_model

    return load_model(name, progress=progress)


def identity(lm) -> dict:
    """What a pack records about the model it was computed on: its name and a digest of its weights."""
    from ..model.weights import fingerprint

    return {"model": lm.name, "fingerprint": fingerprint(lm), "layers": lm.adapter.n_layers}


def methods() -> list[dict]:
    """The registered editing methods, in their order: [{"name", "label", "color", "about"}]."""
    from ..editing.methods import all_methods

    return [{"name": m.name, "label": m.label, "color": m.color, "about": m.about} for m in all_methods()]


def check_methods(names) -> list[str]:
    from ..editing.methods import get

    return [get(n).name for n in names]


def records_from_text(text: str, label: str) -> list[tuple[dict, object]]:
    """(raw row, EvalRecord) for each record of a JSON / JSON-lines text in editkit's, CounterFact's or EasyEdit's
    schema; errors name the record and the file (evaluation/datasets.py)."""
    from ..evaluation.datasets import parse_set_text, records_from

    rows = parse_set_text(text, label)
    return list(zip(rows, records_from(rows, label)))


def record_of(d: dict, relation: str | None = None):
    """An EvalRecord from editkit's request JSON ({"prompt": "... {} ...", "subject", "target_new", ...})."""
    from ..editing.requests import parse_record
    from ..evaluation.datasets import EvalRecord

    request = parse_record(d)
    return EvalRecord(request, None, [(p, request.target_true) for p in request.neighborhood_prompts]
                      if request.target_true else [], "counterfact", str(request.case_id), relation)


def with_target(record, target_new: str):
    """The same record with another new target."""
    from ..evaluation.datasets import EvalRecord

    d = record.request.to_dict()
    d["target_new"] = target_new
    return EvalRecord(record_of(d).request, record.reference_text, record.locality, record.kind, record.source,
                      record.relation)


def first_token(lm, target: str) -> int:
    from ..model.scoring import target_ids

    return target_ids(lm.tok, " " + target.strip())[0]


@contextmanager
def shared_targets():
    """Target optimisations reused within a build, and by a resumed one (editing/memo.py: the same weights,
    request, layer and target hyperparameters give the same v*): ROME's default edit serves its bleed map and the
    sweep's row at that layer, MEMIT's targets serve AlphaEdit (its null space acts only in the solve); and the keys
    ROME reads, within the build (editing/keys.py: the same weights, layer and texts give the same keys)."""
    from ..editing.keys import reuse_keys
    from ..editing.memo import reuse_targets

    with reuse_targets(disk=True) as memo, reuse_keys():
        yield memo


@contextmanager
def session(lm, delta=None):
    """A computation on the base weights (+ `delta`), whatever edits the caller's context holds: a pack, and the
    lesson's live views, are about the unedited model."""
    from ..model import isolation
    from ..model.weights import unedited

    with unedited(), isolation.session(lm, [delta] if delta else []):
        yield lm


# --- step 1 -----------------------------------------------------------------------------------------------------
def predictions(lm, prompt: str, k: int = 5) -> list[dict]:
    """The model's top next tokens after `prompt`: [{"token", "token_id", "prob"}]."""
    from ..model.text import top_k

    with session(lm):
        return [{"token": p.token, "token_id": p.token_id, "prob": p.prob} for p in top_k(lm, prompt, k)]


def known(lm, prompt: str, target_true: str) -> dict:
    """Does the model know the fact? Known when its most likely next token is the first token of the true target
    (ROME's criterion for its known facts, editkit/data/facts.py). Returns the check with the top predictions."""
    top = predictions(lm, prompt, 5)
    answer_id = first_token(lm, target_true)
    return {"known": top[0]["token_id"] == answer_id, "answer": lm.tok.decode([answer_id]), "answer_id": answer_id,
            "predicted": top}


def lens(lm, prompt: str, answer: str | None = None, k: int = 10) -> dict:
    """The top next tokens and the logit lens at the last token (each layer's residual through the final norm and
    unembedding). `answer` (default: the top prediction) is marked: `first_layer` is the first layer whose top
    token it is, `ranks` its rank per layer among the lens's top k (None: below)."""
    from ..lens import logit_lens

    top = predictions(lm, prompt, k)
    with session(lm):
        view = logit_lens(lm, prompt, k=k).to_json()
    answer_token = lm.tok.decode([first_token(lm, answer)]) if answer else top[0]["token"]
    ranks = [next((i for i, t in enumerate(row) if t["token"] == answer_token), None) for row in view["layers"]]
    first = next((l for l, r in enumerate(ranks) if r == 0), None)
    return {"prompt": prompt, "tokens": view["tokens"], "top": top, "layers": view["layers"], "k": k,
            "answer": answer_token, "ranks": ranks, "first_layer": first}


# --- steps 2-3 ----------------------------------------------------------------------------------------------------
def traces(lm, prompt: str, subject: str, answer: str | None, s: Settings, kinds=KINDS, sever: bool = True,
           progress=None, delta: dict | None = None, precision: str | None = None) -> dict:
    """{"traces": kind -> trace, "severing": ROME Fig. 4 at the last subject token or None}: ROME's causal traces
    of `prompt` with noise on `subject`'s embeddings, p(answer) per restored state (answer: the first token of
    `answer`, default the model's prediction), on the base weights + `delta`. Shared result cache: a fact traced
    before (on the same weights) comes back at once. `precision` "bfloat16": the engine's fast mode (labelled an
    approximation in every result) where this machine computes bf16 faster than float32, else the exact engine (each
    trace's meta says which ran); default the settings' trace_precision."""
    from ..core.progress import part
    from ..tracing import Tracer, TraceSpec
    from ..tracing.spec import effective_precision

    precision = effective_precision(precision or s.trace_precision, lm.device)  # fast mode: only where it is faster
    n = len(kinds) + bool(sever)
    out, severing = {}, None
    with session(lm, delta):  # the tracer is made and used in the context of the weights it traces
        tracer = Tracer(lm, TraceSpec(prompt, subject, (" " + answer.strip()) if answer else None, s.samples,
                                      s.noise, s.window, s.seed, precision=precision))
        # the panels in one schedule (tracer.results together: larger batches, one pass over the vocabulary)
        step = part(progress, 0, (n - 1) / n if sever else 1.0, "traces: ")
        out = {k: _trace_dict(r) for k, r in tracer.results(kinds, progress=step, together=True).items()}
        if sever:  # at the subject token where the hidden-state trace peaks (default: the last subject token)
            step = part(progress, (n - 1) / n, 1.0, "severing: ")
            token = subject_peak(out["hidden"])[0] if "hidden" in out else None
            severing = tracer.severing(token, progress=step).to_json()
    return {"traces": out, "severing": rounded(severing) if severing else None}


def fast_note(model: str) -> str:
    """What a trace in the engine's fast mode says about itself (its error measured on the model, if it was)."""
    from ..tracing.bench import fast_note as note

    return note(model)


def _trace_dict(result) -> dict:
    d = result.to_json()
    d.pop("indirect_effect", None)  # scores - low_score: derived
    d["meta"] = {k: v for k, v in d.get("meta", {}).items()
                 if k in ("model", "prompt", "engine", "precision", "approximation")}
    return rounded(d)


def subject_peak(trace: dict) -> tuple[int, int]:
    """(token, layer) of the largest score at the subject's tokens: where restoring a state of the subject helps
    most (ROME finds it at the last subject token; a subject of several words may peak at an earlier one)."""
    b, e = trace["subject_range"]
    return max(((t, l) for t in range(b, e) for l in range(len(trace["scores"][t]))),
               key=lambda x: trace["scores"][x[0]][x[1]])


# --- step 4 -------------------------------------------------------------------------------------------------------
def memories(lm, prompt: str, token: int, layer: int, s: Settings, answer: str | None = None) -> dict:
    """The FFN memories (Geva et al. 2021) of `layer` at `token`: coefficients m_i, value norms and value tokens
    (as decoded, with the top Latin-script words added: memories/vocab.py), and the answer token (default: the
    model's prediction) to look for among the values."""
    from ..memories.inspect import memories_at
    from ..memories.vocab import readable

    with session(lm):
        view = memories_at(lm, prompt, layer, token, s.memories_top, token_filter="latin").to_json()
        answer_id = first_token(lm, answer) if answer else predictions(lm, prompt, 1)[0]["token_id"]
    view["lens"] = [{"layer": r["layer"], "before": r["before"][:3], "after": r["after"][:3]} for r in view["lens"]]
    for m in view["memories"]:  # as a student reads them: a leading space as ␣, a byte fragment as �
        m["value_text"] = [readable(t["token"]) for t in m["value_tokens"]]
        m["latin_text"] = [f"{readable(t['token'])} (#{t['rank']:,})" for t in m.get("filtered_tokens", [])]
    return rounded({**view, "answer": lm.tok.decode([answer_id]), "answer_id": answer_id, "d_ff": lm.adapter.d_ff})


def memories_at_peak(lm, prompt: str, mlp_trace: dict, s: Settings) -> dict:
    """The memories at the subject token and layer where the MLP trace peaks (the centre of the restored window
    with the largest effect at the subject's tokens)."""
    token, layer = subject_peak(mlp_trace)
    return memories(lm, prompt, token, layer, s, mlp_trace["answer"])


# --- steps 5, 6, 8 --------------------------------------------------------------------------------------------------
def edit(lm, method: str, record, s: Settings, progress=None, pre: dict | None = None) -> tuple[dict, dict]:
    """Edit `record` with `method` on the base weights and measure it before and after (teacher-forced
    probabilities and rates, greedy continuations and the generation-based success); returns (result, delta).
    The method is found through the registry and its typed EditResult read without knowing which method it is.
    `pre`: the record's measurement before the edit (pre_measure), when another method's edit already took it."""
    from ..editing.methods import get
    from ..evaluation.measure import EvalSpec, edit_and_measure, probabilities

    spec = get(method)
    keep: dict = {}
    measured = EvalSpec(n=1, n_gen=0, gen_tokens=0, greedy_tokens=s.greedy_tokens)
    with session(lm):
        rows = edit_and_measure(lm, spec.name, [record], None, measured, [pre] if pre else None, keep,
                                progress)
    row, result = rows[0], keep["result"]
    r = record.request
    out = {"method": spec.name, "label": spec.label, "color": spec.color, "target_new": r.target_new,
           "target_true": r.target_true, "rewrite": r.rewrite, "seconds": result.seconds,
           "layers": edited_layers(lm, result),
           "probabilities": {"pre": probabilities(row["pre"]), "post": probabilities(row["post"])},
           "greedy": {"pre": row["pre"].get("greedy"), "post": row["post"].get("greedy")},
           "metrics": row["metrics"],
           "relative_norm": {name: n.relative_norm for name, n in result.norms.items()}}
    return rounded(out), result.delta


def edited_layers(lm, result) -> list[int]:
    """The layers whose editable linear maps an EditResult changes (its per-parameter norms, by name)."""
    names = {lm.adapter.param_name(part, l): l for part in lm.adapter.LINEAR_PARTS
             for l in range(lm.adapter.n_layers)}
    return sorted({names[k] for k in result.norms if k in names})


def pre_measure(lm, record, s: Settings) -> dict:
    """The measurement `edit` takes before an edit (the same for every method: computed once per record)."""
    from ..evaluation.measure import measure

    with session(lm):
        return measure(lm, record, n_gen=0, gen_tokens=0, greedy_tokens=s.greedy_tokens)


def retrace(lm, record, delta: dict, s: Settings, progress=None) -> dict:
    """The hidden-state trace of the rewrite prompt in the edited model, with the new target as the answer, at the
    settings' retrace_precision and retrace_samples (the first of the fact's trace's noise draws)."""
    r = record.request
    s = replace(s, samples=s.retrace_samples or s.samples)  # the first of the fact's noise draws
    out = traces(lm, r.rewrite, r.subject, r.target_new, s, kinds=("hidden",), sever=False, progress=progress,
                 delta=delta, precision=s.retrace_precision)
    return out["traces"]["hidden"]


# --- step 7 ---------------------------------------------------------------------------------------------------------
def bleed(lm, record, s: Settings, method: str = "rome", progress=None) -> dict:
    """The bleed map of the edit (evaluation/bleed.py): per prompt about another subject, the rise of P(new) and
    the share of the edit's own change the update predicts there."""
    from ..evaluation.bleed import bleed_map

    with session(lm):
        out = bleed_map(lm, method, record.request, relation=record.relation, n_facts=s.bleed_facts,
                        progress=progress).to_json()
    out.pop("hparams", None)
    return rounded(out)


def ripple(lm, record, method: str = "rome", progress=None) -> dict:
    """The facts the edit implies (evaluation/ripple.py: derived from the model's own answers) before and after
    `method`'s edit and after the in-context reference."""
    from ..evaluation.ripple import ripple as ripple_of
    from ..model.scoring import score_targets

    with session(lm):
        out = ripple_of(lm, record.request, [method], record.relation, progress=progress).to_json()
        facts = out.get("facts") or []
        before = score_targets(lm, [f["prompt"] for f in facts], [f["answer"] for f in facts]) if facts else []
    for f, sc in zip(facts, before):  # step 11 asks only about facts the model answered so before the edit
        f["top1_before"] = all(sc.token_hits)
    return rounded(out)


# --- step 9 ---------------------------------------------------------------------------------------------------------
def layer_sweep(lm, record, mlp_trace: dict | None, s: Settings, layers=None, progress=None) -> dict:
    """ROME at each layer (default: the pack's `sweep_layers`) for the record, beside its MLP trace: the trace's
    row at the subject token where it peaks (evaluation/layer_sweep.py reads the row of the subject range's last
    token, so the range handed to it ends at that token)."""
    from ..evaluation.layer_sweep import layer_sweep as sweep
    from ..tracing import TraceResult

    trace = None
    if mlp_trace is not None:
        token = subject_peak(mlp_trace)[0]
        trace = TraceResult.from_json({**mlp_trace, "subject_range": [mlp_trace["subject_range"][0], token + 1]})
    with session(lm):
        out = sweep(lm, record, s.sweep_layers if layers is None else layers, "rome", None, "mlp", s.samples,
                    progress=progress, trace_result=trace).to_json()
    if out.get("trace"):
        out["trace"] = {k: v for k, v in out["trace"].items() if k != "trace"}  # the MLP trace is stored once
    return rounded(out)


# --- step 10 --------------------------------------------------------------------------------------------------------
def lifelong() -> dict:
    """The shipped lifelong-editing run (500 CounterFact edits on the embedded model): method -> result, with
    the final table."""
    from ..evaluation.lifelong import SHIPPED, final_table, load_results, styled

    results = styled(load_results(SHIPPED))
    return {"results": {m: r.to_json() for m, r in results.items()}, "table": final_table(results),
            "source": SHIPPED.name}


def lifelong_run(lm, methods_: list[str], n: int, batch: int, progress=None) -> dict:
    """A short lifelong run of your own: the first `n` CounterFact records, batch after batch (ROME one by one)."""
    from ..core.progress import part
    from ..editing.methods import get
    from ..evaluation import load_eval_set, sequential
    from ..evaluation.lifelong import final_table, styled
    from ..evaluation.sequential import SequentialSpec

    records = load_eval_set("counterfact", n)
    results = {}
    with session(lm):
        for i, m in enumerate(methods_):
            b = batch if get(m).batch else 1
            spec = SequentialSpec(batch=b, eval_every=b * max(1, batch // b), sample=10, ppl_tokens=256,
                                  fluency_tokens=15)
            results[m] = sequential(lm, m, records, None, spec,
                                    progress=part(progress, i / len(methods_), (i + 1) / len(methods_)))
    return {"results": {m: r.to_json() for m, r in styled(results).items()}, "table": final_table(results),
            "source": "your run"}


def own_ram(lm, step: int, s: Settings, methods_: list[str] | None = None) -> int:
    """Bytes a "try your own" run of `step` needs beyond the weights (the queue admits it within its budget): the
    step's traces (tracing/ram.py) and edits (editing/ram.py) at this pack's settings."""
    from ..editing.ram import edit_ram, scoring_ram
    from ..model.ram import vocab_bytes, with_margin
    from ..tracing.ram import FACT_TOKENS, trace_ram

    names = methods_ or [m["name"] for m in methods()]
    trace = trace_ram(lm, "", s.samples, tokens=FACT_TOKENS)
    rome = edit_ram(lm, ["rome"])
    lens = with_margin(vocab_bytes(lm, FACT_TOKENS))
    return {1: lens, 2: trace, 3: trace, 4: lens, 5: rome, 6: rome + trace, 7: rome, 8: edit_ram(lm, names),
            9: rome + trace, 10: edit_ram(lm, names, 50) + scoring_ram(lm),
            11: rome + scoring_ram(lm)}.get(step, trace + rome)


def build_ram(lm, s: Settings, methods_: list[str] | None = None) -> int:
    """Bytes adding a fact to a pack needs: every step's computation, one after another, while the edits' deltas
    are kept (the largest trace plus the largest edit)."""
    return own_ram(lm, 8, s, methods_) + own_ram(lm, 2, s, methods_)


# --- first-use statistics (editing/stats.py), for the time a fact takes ---------------------------------------
def statistics_needed(model: str, method: str, layers: list[int] | None = None) -> list[dict]:
    """The first-use statistics an edit by `method` on `model` (at `layers`; default its own) still computes, by
    what this machine's cache holds: [{"module", "positions", "tokens", "layers"}], one statistics pass each.
    Read from the cache's file names: nothing loads."""
    from ..editing.defaults import load_hparams
    from ..editing.run import first_use

    hp = load_hparams(method, model, {"layers": list(layers)} if layers is not None else None)
    need = first_use(model, hp, method).get("statistics", {})
    return [{"module": module, "positions": positions, "tokens": hp.mom2_n_tokens, "layers": sorted(ls)}
            for module, by in need.items() for positions, ls in by.items()]


def statistics_seconds(model: str, n_layers: int, needed: dict) -> float | None:
    """How long one pass of `statistics_needed` takes on this machine: from the seconds its cached statistics
    of another layer recorded (stats.pass_seconds); None when it has none for this model yet."""
    from ..editing.stats import pass_seconds

    return pass_seconds(model, needed["layers"], needed["tokens"], needed["module"], needed["positions"],
                        n_layers=n_layers)


def sweep_layer_list(s: Settings, n_layers: int) -> list[int]:
    """The layers of the layer sweep (step 9) at the settings `s`."""
    from ..evaluation.layer_sweep import parse_layers

    return parse_layers(s.sweep_layers, n_layers)


# --- the comparisons' conclusions (evaluation/verdict.py) ----------------------------------------------------------
def sweep_ranking(sweep: dict):
    """A layer sweep's layers (the pack's JSON) ranked by the summed margins, with their noise (None: stored
    without margins)."""
    from ..evaluation.layer_sweep import ranking

    return ranking({r["layer"]: r.get("margins") for r in sweep.get("rows") or []})


def methods_ranking(edits: dict):
    """Methods (name -> edit result, one request) ranked by the summed margins on the request's prompts, paired
    prompt by prompt."""
    from ..evaluation.verdict import MARGIN_MEASURE, margins, paired

    return paired({m: margins(e["probabilities"]["post"]) for m, e in edits.items()}, f"the summed margin "
                  f"({MARGIN_MEASURE})", labels={m: e["label"] for m, e in edits.items()})


def lifelong_conclusion(results: dict) -> str:
    """Lifelong runs (the pack's JSON, method -> run) in one sentence: the first to collapse, the one keeping the
    most edits (with its noise)."""
    from ..evaluation.lifelong import conclusion
    from ..evaluation.sequential import LifelongRun

    return conclusion({m: LifelongRun.from_json(r) for m, r in results.items()})
