"""The notebook API: each of editkit's computations in one call, returning a typed result.

    import editkit
    lm = editkit.load("gemma-3-270m")                       # the embedded model, offline
    editkit.predict(lm, "The Space Needle is in downtown")  # Predictions: the top next tokens
    tr = editkit.trace(lm, "The Space Needle is in downtown", "Space Needle")   # Traces: hidden, mlp, attn
    tr.figure(); tr.to_frame(); tr["mlp"].peak()
    ed = editkit.edit(lm, "rome", {"prompt": "{} is in downtown", "subject": "The Space Needle",
                                   "target_new": "Paris"})  # EditReport: P(new), P(true) before and after
    ed.to_frame(); ed.figure()
    editkit.predict(lm, "The Space Needle is in downtown", edit=ed)   # with the edit (the model never changes)

Every result is a dataclass with `to_json()` / `from_json()` (the JSON the caches, Ray and the CLI's `--json`
write), `to_frame()` (a pandas table), `figure()` (the plotly figure the app's pages draw) and a notebook view.
Settings the library keeps in dataclasses are taken as they are: `TraceSpec` (a trace), `EvalSpec` (a batch
evaluation), `SequentialSpec` (lifelong editing).

`edit=` on the reading functions computes with one or several edits applied (an EditReport, an EditResult or a
weight delta dict), in this call only: the base weights stay as they are for everything else.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from .core.errors import EditkitError
from .core.results import frame
from .data.implications import check_relation
from .editing.methods import Method, all_methods
from .editing.methods import get as get_method
from .evaluation.bleed import BleedMap, bleed_map
from .evaluation.compare import Comparison, compare_methods
from .evaluation.datasets import load_eval_set
from .evaluation.evaluate import Evaluation
from .evaluation.evaluate import evaluate as _evaluate
from .evaluation.layer_sweep import LayerSweep
from .evaluation.layer_sweep import layer_sweep as _layer_sweep
from .evaluation.lifelong import Lifelong
from .evaluation.measure import EvalSpec
from .evaluation.report import EditReport, edit_report
from .evaluation.ripple import RippleResult
from .evaluation.ripple import ripple as _ripple
from .evaluation.ripple_eval import RippleEvaluation, RippleSpec, evaluate_ripple
from .evaluation.sequential import SequentialSpec, sequential_methods
from .evaluation.sweep import SWEEP, Sweep
from .evaluation.sweep import sweep as _sweep
from .lens import LogitLens, Predictions
from .lens import logit_lens as _logit_lens
from .lens import predict as _predict
from .memories.inspect import MemoryView, memories_at
from .model import isolation
from .model.loading import DEFAULT_MODEL, LM, list_models, load_model
from .model.weights import WeightDelta
from .runtime.cluster import Backend
from .similarity import SimilarityResult
from .similarity import similarity as _similarity
from .tracing import Severing, Tracer, TraceResult, Traces, TraceSpec
from .tracing import trace as _trace
from .tracing.aie import AIE, average_indirect_effect, shipped_runs


def load(name: str = DEFAULT_MODEL, dtype=None, device: str | None = None, progress=None) -> LM:
    """Load a model: "gemma-3-270m" (embedded, offline), "smollm2-135m", a tiny test model ("tiny-gpt2"), a
    Hugging Face hub id, a folder or a GGUF file. `dtype` float32 (default), "bfloat16" or "float16"; `device`
    defaults to CUDA when present. The first load of a shipped model converts it once (about a minute)."""
    return load_model(name, device=device, progress=progress, dtype=dtype)


def models():
    """The models editkit ships (the embedded one first) and its tiny test models, as a table."""
    return frame(list_models())


def methods() -> list[Method]:
    """The registered editing methods, in order (each with its name, label, colour and a line about it)."""
    return all_methods()


def _deltas(edit) -> list[WeightDelta]:
    """The weight deltas of `edit`: None, an EditReport / EditResult, a delta dict, or a list of them."""
    if edit is None:
        return []
    if isinstance(edit, (list, tuple)):
        return [d for e in edit for d in _deltas(e)]
    delta = edit.delta if hasattr(edit, "delta") else edit
    if not isinstance(delta, dict) or not delta:
        raise EditkitError("this edit carries no weight change (a result read back from JSON keeps only its "
                           "numbers: save the delta with editkit.model.weights.save_patch)")
    return [delta]


@contextmanager
def applied(lm, edit):
    """A block whose computations (in this thread) see the weights with `edit` applied (an EditReport, an
    EditResult, a delta dict or a list of them); the model itself is never changed."""
    with isolation.session(lm, _deltas(edit)):
        yield lm


def predict(lm, prompt: str, k: int = 5, edit=None) -> Predictions:
    """The top `k` next tokens after `prompt` with their probabilities (with `edit` applied, if given)."""
    with applied(lm, edit):
        return _predict(lm, prompt, k)


def logit_lens(lm, prompt: str, k: int = 5, position: int = -1, edit=None) -> LogitLens:
    """The logit lens (nostalgebraist 2020): each layer's residual at `position` read through the final norm and
    the unembedding, its top `k` tokens per layer."""
    with applied(lm, edit):
        return _logit_lens(lm, prompt, k, position)


def trace(lm, prompt: str | TraceSpec, subject: str | None = None, kind: str | None = None, kinds=None,
          target: str | None = TraceSpec.target, samples: int = TraceSpec.samples, noise=TraceSpec.noise,
          window: int = TraceSpec.window, seed: int = TraceSpec.seed, edit=None, cache: bool = True,
          progress=None) -> TraceResult | Traces:
    """Causal tracing (Meng et al. 2022): noise on `subject`'s embeddings in `samples` corrupted runs, then each
    (token, layer) state of a kind restored to its clean value; p(`target`) (default: the clean top token) per
    restoration. One `kind` ("hidden", "mlp" or "attn") gives a TraceResult; otherwise Traces of `kinds` (default
    all three). `noise` "3s" = 3 x the embeddings' std; MLP and attention restore `window` layers together.
    `prompt` may be a whole TraceSpec. Results come from the shared cache when traced before (cache=False
    recomputes)."""
    if isinstance(prompt, TraceSpec):
        spec = prompt
    else:
        spec = TraceSpec(prompt, subject, target, samples, noise, window, seed,
                         kinds=kind if kind is not None else (kinds or TraceSpec.kinds))
    if kind is not None and spec.kinds != (kind,):
        spec = replace(spec, kinds=(kind,))
    with applied(lm, edit):
        out = _trace(lm, spec, progress=progress, cache=cache)
    return out[kind] if kind is not None else out


def severing(lm, prompt: str | TraceSpec, subject: str | None = None, token: int | None = None,
             target: str | None = TraceSpec.target, samples: int = TraceSpec.samples, noise=TraceSpec.noise,
             seed: int = TraceSpec.seed, edit=None, cache: bool = True, progress=None) -> Severing:
    """ROME's Fig. 4 at `token` (default: the last subject token): the hidden state restored per layer with
    nothing, the MLPs or the attention frozen at their corrupted values in every later layer."""
    spec = prompt if isinstance(prompt, TraceSpec) else TraceSpec(prompt, subject, target, samples, noise,
                                                                  seed=seed)
    with applied(lm, edit):
        return Tracer(lm, spec, cache=cache).severing(token, progress)


def aie(lm, n_facts: int = 50, samples: int = TraceSpec.samples, noise: str = "3s", window: int = TraceSpec.window,
        edit=None, cache: bool = True, progress=None, backend: Backend | None = None) -> AIE:
    """The average indirect effect (ROME Fig. 2) over the first `n_facts` known facts the model predicts, per
    kind and token class with 95% bands. Hours for 100 facts on a CPU; facts traced before come from the cache.
    `backend`: a Ray cluster (editkit/runtime/cluster.py) to trace facts in parallel."""
    with applied(lm, edit):
        return average_indirect_effect(lm, n_facts, samples, noise, window, progress=progress, cache=cache,
                                       backend=backend)


def shipped_aie() -> dict[str, AIE]:
    """The AIE runs the manual reports (model name -> AIE), read from the package without computing."""
    return shipped_runs()


def edit(lm, method: str, request_or_requests, hparams=None, progress=None) -> EditReport:
    """Edit facts with a registered method ("rome", "memit", "pmet", "alphaedit", "ultraedit", "coedit":
    `methods()`), and measure each request's prompts before and after: P(target_new) and P(target_true) on the
    rewrite, paraphrase and neighbourhood prompts. A request is editkit's JSON, a CounterFact or EasyEdit record, a
    list of them or a file. editkit's fields: "prompt" (with "{}" for the subject), "subject", "target_new";
    optional "target_true" (needed to say whether the rewrite won), "paraphrase_prompts", "neighborhood_prompts",
    "generation_prompts", "case_id", and "relation", the Wikidata relation ("P131", "P103", ...) implied facts
    are derived from (co-edit writes none without it unless the prompt is a CounterFact template).
    `hparams` overrides the model's defaults (a dict). The model is not changed: use the result with `edit=` or
    `applied(lm, result)`. `report.result.diagnostics` says when an edit does not win its own rewrite (and the
    likely reason) or co-edit found nothing implied to write."""
    return edit_report(lm, method, request_or_requests, hparams, progress)


def compare(lm, request_or_requests, methods=None, hparams: dict | None = None, n_gen: int = 0,
            gen_tokens: int = 30, progress=None) -> Comparison:
    """Several methods (default: every registered one) edit the same request(s) from the same weights, each
    measured the same way as the batch evaluation measures (efficacy, generalization, specificity, generation
    success, with `n_gen` sampled generations of `gen_tokens` tokens for fluency). `hparams` = {method: overrides}.
    The result's table is the Edit & compare page's metrics; `.methods[name].result` is each method's edit."""
    names = [m.name for m in all_methods()] if methods is None else [methods] if isinstance(methods, str) \
        else list(methods)
    records = request_or_requests if isinstance(request_or_requests, list) else [request_or_requests]
    return compare_methods(lm, names, records, hparams, n_gen, gen_tokens, progress)


def bleed(lm, method: str, request, hparams: dict | None = None, n_facts: int = 20, relation: str | None = None,
          extra: list[str] | None = None, progress=None) -> BleedMap:
    """The bleed map of one edit: per prompt about another subject (the request's neighbourhood prompts, up to
    `n_facts` known facts of the same relation, `extra` prompts), the measured rise of P(target_new) and the
    update's predicted share s at the token where it is largest (ROME: s(k) = (C^-1 k*)^T k / (C^-1 k*)^T k*)."""
    return bleed_map(lm, method, request, hparams, relation, n_facts, extra, progress)


def ripple(lm, request, methods=("rome", "memit"), relation: str | None = None, hparams: dict | None = None,
           reference: bool = True, progress=None) -> RippleResult:
    """What one edit should move beside what it must not (RippleEdits' criteria): the implied facts derived from
    the model's own answers (logical generalization, aliasing: should move; relation specificity, preservation:
    should stay), P(expected) before and after each method, and after the in-context reference (`reference`: the
    new fact written before every prompt, no weight change). `relation` is the Wikidata relation (P131, P17, ...)
    when the request does not carry it and its template is not a known one."""
    from .evaluation.datasets import as_record

    record = as_record(request)
    names = [methods] if isinstance(methods, str) else list(methods)
    if relation:
        check_relation(relation)
    return _ripple(lm, record.request, names, relation or record.relation, hparams, reference=reference,
                   progress=progress)


def ripple_evaluation(lm, methods, n: int = 100, set_name: str = "counterfact", hparams: dict | None = None,
                      out_dir=None, progress=None, backend: Backend | None = None,
                      run: bool = True) -> RippleEvaluation:
    """Ripple effects over `n` CounterFact edits the model knows (each edited alone; subjects of counterfact-val
    left out unless `set_name="counterfact-val"`, where settings are chosen): per method and criterion the share
    of implied facts that moved / stayed as they should, with 95% intervals and the paired difference to MEMIT.
    Results files (in a checkout: assets/results/ripple/<model>/) resume an interrupted run; `backend` spreads
    the edits over Ray with the same numbers; `run=False` tabulates the rows already there (a partial table)."""
    names = [methods] if isinstance(methods, str) else list(methods)
    return evaluate_ripple(lm, names, RippleSpec(set_name=set_name, n=n), hparams, out_dir, backend, progress,
                           run=run)


def evaluate(lm, methods, spec: EvalSpec = EvalSpec(), hparams: dict | None = None, out_dir=None,
             progress=None, backend: Backend | None = None) -> Evaluation:
    """Edit and measure the records `spec` names (a shipped set such as "counterfact" or "counterfact-val", or a
    records file; `spec.n` of them, `spec.batch` per edit) with each method, and summarize: each metric's mean and
    95% half-width x100 before and after, and the Score (PMET Table 1). Results files resume an interrupted run;
    `backend` spreads the batches over a Ray cluster with the same numbers. A set name or file for `spec` means
    EvalSpec(set_name=...)."""
    return _evaluate(lm, [methods] if isinstance(methods, str) else list(methods), _spec(spec, EvalSpec()), hparams,
                     out_dir, progress=progress, backend=backend)


def _spec(spec, default: EvalSpec) -> EvalSpec:
    """`spec` as an EvalSpec: a set name or records file (str or Path) is `default` on that set."""
    if isinstance(spec, (str, Path)):
        return replace(default, set_name=str(spec))
    if not isinstance(spec, EvalSpec):
        raise EditkitError(f"spec must be an EvalSpec or the name of a set or records file, not {type(spec).__name__}")
    return spec


def sweep(lm, method: str, params, spec: EvalSpec = SWEEP, hparams: dict | None = None, progress=None,
          backend: Backend | None = None) -> Sweep:
    """`method` at every combination of `params` ({name: [values]} or ["name=v1,v2", ...]) on the records `spec`
    names (by default 50 of counterfact-val, the validation set: choose hyperparameters there, report elsewhere);
    each setting's rates, and the Pareto-optimal settings of efficacy, generalization and specificity. A set name
    for `spec` keeps the sweep's other settings."""
    return _sweep(lm, method, params, _spec(spec, SWEEP), hparams, progress=progress, backend=backend)


def layer_sweep(lm, request, layers="all", method: str = "rome", hparams: dict | None = None,
                trace_kind: str | None = "mlp", samples: int = TraceSpec.samples, progress=None,
                backend: Backend | None = None) -> LayerSweep:
    """Does the traced layer edit best? (Hase et al. 2023): `method` edits the request at each of `layers`, one
    layer at a time, measured on its own prompts, beside the request's `trace_kind` trace on the same layer axis.
    The request needs its true target."""
    return _layer_sweep(lm, request, layers, method, hparams, trace_kind, samples, progress, backend=backend)


def lifelong(lm, methods, records="counterfact", n: int = 50, spec: SequentialSpec = SequentialSpec(),
             hparams: dict | None = None, progress=None, backend: Backend | None = None) -> Lifelong:
    """Lifelong editing: each method applies `n` records (of a shipped set or file, or a list of requests) batch
    after batch, each batch at the weights the earlier ones left, measured at checkpoints (efficacy, retention,
    perplexity, ||dW||; `spec`). A method that edits one request at a time (ROME) runs with batch 1. Resumable:
    a rerun continues from the last saved batch."""
    names = [methods] if isinstance(methods, str) else list(methods)
    chosen = load_eval_set(records, n) if isinstance(records, str) else list(records)[:n]
    one = replace(spec, batch=1, eval_every=spec.every)  # for a method that edits one request at a time
    plans = {m: ((hparams or {}).get(m), spec if get_method(m).batch else one) for m in names}
    runs = sequential_methods(lm, plans, chosen, progress=progress, backend=backend)
    return Lifelong.of(runs, records if isinstance(records, str) else "your records")


def ffn_memories(lm, prompt: str, layer: int, position: int = -1, top: int = 10, edit=None) -> MemoryView:
    """The FFN memories (Geva et al. 2021) of `layer` at `position`: the `top` memories by |m_i| ||v_i||, each with
    its value vector's top tokens, and the logit lens before and after each FFN."""
    with applied(lm, edit):
        return memories_at(lm, prompt, layer, position, top)


def similarity_curves(lm, n: int = 50, mode: str = "residual", prompts: list[str] | None = None, edit=None,
               cache: bool = True, progress=None) -> SimilarityResult:
    """PMET's Fig. 2: per layer, the cosine and top-50 Jaccard similarity of the state entering and leaving the
    attention and the FFN at the last token, over `n` known facts (or `prompts`), with 95% bands."""
    with applied(lm, edit):
        return _similarity(lm, n, prompts=prompts, mode=mode, cache=cache, progress=progress)


__all__ = ["load", "models", "methods", "applied", "predict", "logit_lens", "trace", "severing", "aie",
           "shipped_aie", "edit", "compare", "bleed", "evaluate", "sweep", "layer_sweep", "lifelong",
           "ffn_memories", "similarity_curves"]
