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

Beyond the recipes: `load(model, tokenizer)` takes a transformers model object, `activations` reads any sites
for a batch of prompts, `intervene` runs the model with your own functions at sites, `preview` is the trace's
first-order estimate with its measured agreement. predict, logit_lens and trace take lists of prompts (a Batch
of results). Long calls draw a progress bar in a notebook (`set_progress(False)` turns them off).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from .core.errors import EditkitError
from .core.progress import part, set_bars, to_stderr, with_bar
from .core.results import Batch, frame
from .data.implications import check_relation
from .editing.methods import Method, all_methods
from .editing.methods import get as get_method
from .editing.result import EditResult
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
from .figures.notebook import use_in_notebook
from .lens import LogitLens, Predictions
from .lens import logit_lens as _logit_lens
from .lens import predict as _predict
from .memories.inspect import MemoryView, memories_at
from .model import isolation
from .model.activations import Activations, read_activations
from .model.interventions import Intervention
from .model.loading import (
    DEFAULT_MODEL,
    LM,
    deferred_load,
    list_models,
    load_model,
    shipped_folder,
    wrap_model,
)
from .model.shipped import SHIPPED
from .model.weights import WeightDelta, combined
from .model.weights import load_patch as _load_patch
from .model.weights import save_patch as _save_patch
from .runtime.cluster import Backend
from .similarity import SimilarityResult
from .similarity import similarity as _similarity
from .tracing import Severing, Tracer, TraceResult, Traces, TraceSpec
from .tracing import trace as _trace
from .tracing.aie import AIE, average_indirect_effect, shipped_runs
from .tracing.spec import trace_specs


@with_bar("loading")
def load(model=DEFAULT_MODEL, tokenizer=None, dtype=None, device: str | None = None, progress=None) -> LM:
    """Load a model: "gemma-3-270m" (embedded, offline), "smollm2-135m", a tiny test model ("tiny-gpt2"), a
    Hugging Face hub id, a folder or a GGUF file; or take a causal LM already loaded with transformers
    (`model` an AutoModelForCausalLM, `tokenizer` its tokenizer, default the one saved beside it), on its own
    device and dtype. Either way the architecture's layout is checked on one run before use. `dtype` float32
    (default), "bfloat16" or "float16"; `device` defaults to CUDA when present. The first load of a shipped
    model converts it once (about a minute). A model already converted (a shipped one, a GGUF file) in float32
    is loaded at its first use (`lm.pending` until then): `load` returns in about two seconds, and `predict`
    answers one prompt by the light forward meanwhile (model/quick.py)."""
    use_in_notebook()  # bare figures (tr.figure()) draw offline in an exported notebook (figures/notebook.py)
    if isinstance(model, (str, Path)):
        if tokenizer is not None:
            raise EditkitError("a tokenizer goes with a loaded model object; a name or folder brings its own")
        if (lm := deferred_load(str(model), device, dtype, to_stderr)) is not None:
            return lm
        return load_model(str(model), device=device, progress=progress, dtype=dtype)
    if dtype is not None or device is not None:
        raise EditkitError("a loaded model keeps its own device and dtype: move it first (model.to(...)), "
                           "then editkit.load(model, tokenizer)")
    return wrap_model(model, tokenizer, progress)


@with_bar("preparing the model")
def model_folder(name: str = DEFAULT_MODEL, progress=None) -> Path:
    """The folder of a shipped model's float32 safetensors (converted from its GGUF the first time, about a
    minute), to load it with transformers yourself: AutoModelForCausalLM.from_pretrained(model_folder())."""
    if name not in SHIPPED:
        raise EditkitError(f"{name!r} is not a shipped model; these are: {', '.join(SHIPPED)}")
    say = (lambda message: progress(0.0, message)) if progress else (lambda message: None)
    return shipped_folder(name, say)


def set_progress(on: bool | None = True) -> None:
    """Progress bars (tqdm) for calls that take more than a few seconds: on (True), off (False), or automatic
    (None, the default: on in a Jupyter kernel; EDITKIT_PROGRESS=0 turns the default off). A call's own
    `progress=False` silences that call, a callback given replaces the bar."""
    set_bars(on)


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
                           "numbers: save the weight change with editkit.save_patch, read it with "
                           "load_patch)")
    return [delta]


@contextmanager
def applied(lm, edit):
    """A block whose computations (in this thread) see the weights with `edit` applied (an EditReport, an
    EditResult, a delta dict or a list of them); the model itself is never changed."""
    with isolation.session(lm, _deltas(edit)):
        yield lm


def activations(lm, prompts, sites, edit=None) -> Activations:
    """The tensors at `sites` (editkit's names: "resid_pre.3", "mlp_out.5", "attn_out.5", "embed", ...;
    "mlp_out.*" for every layer) for a prompt or a list of prompts, from one run of the model (with `edit` and
    any open `intervene` block applied): a tensor (prompts, tokens, width) per site, the token strings, the
    next-token logits (`.probs(token)`), and `.to_frame()`."""
    with applied(lm, edit):
        return read_activations(lm, prompts, sites)


def intervene(lm) -> Intervention:
    """A block in which every whole run of `lm` goes through your functions at sites, in this thread only:

        with editkit.intervene(lm) as iv:
            iv.patch("mlp_out.5", values, positions=4)  # or ablate(site), add(site, vector), apply(site, fn)
            editkit.predict(lm, prompt)                 # and activations, logit_lens: with the interventions

    Leaving the block removes every hook. Traces and edits are refused inside it (they run the model in pieces
    and read caches that hold the model's numbers without your functions)."""
    return Intervention(lm)


def _batch(prompt, one, what: str):
    """`one(prompt)` for one prompt; a Batch of `one(p)` for a list of prompts (an empty list is refused)."""
    if isinstance(prompt, (list, tuple)):
        if not prompt:
            raise EditkitError(f"{what}: the list of prompts is empty")
        return Batch([one(p) for p in prompt], list(prompt))
    return one(prompt)


def predict(lm, prompt: str | list[str], k: int = 5, edit=None) -> Predictions | Batch:
    """The top `k` next tokens after `prompt` with their probabilities (with `edit` applied, if given); a list
    of prompts gives a Batch of Predictions, in order."""
    with applied(lm, edit):
        return _batch(prompt, lambda p: _predict(lm, p, k), "predict")


def logit_lens(lm, prompt: str | list[str], k: int = 5, position: int = -1, edit=None) -> LogitLens | Batch:
    """The logit lens (nostalgebraist 2020): each layer's residual at `position` read through the final norm and
    the unembedding, its top `k` tokens per layer; a list of prompts gives a Batch of them."""
    with applied(lm, edit):
        return _batch(prompt, lambda p: _logit_lens(lm, p, k, position), "logit_lens")


@with_bar("tracing")
def trace(lm, prompt: str | TraceSpec | list, subject: str | list | None = None, kind: str | None = None,
          kinds=None, target: str | None = TraceSpec.target, samples: int = TraceSpec.samples,
          noise=TraceSpec.noise, window: int = TraceSpec.window, seed: int = TraceSpec.seed, edit=None,
          cache: bool = True, progress=None) -> TraceResult | Traces | Batch:
    """Causal tracing (Meng et al. 2022): noise on `subject`'s embeddings in `samples` corrupted runs, then
    each (token, layer) state of a kind restored to its clean value; p(`target`) (default: the clean top
    token) per restoration. One `kind` ("hidden", "mlp" or "attn") gives a TraceResult; otherwise Traces of
    `kinds` (default all three). `noise` "3s" = 3 x the embeddings' std; MLP and attention restore `window`
    layers together. `prompt` may be a whole TraceSpec. A list of prompts with a list of subjects (or a list
    of TraceSpecs) gives a Batch, one result per prompt. Results come from the shared cache when traced before
    (cache=False recomputes)."""
    settings = {"target": target, "samples": samples, "noise": noise, "window": window, "seed": seed,
                "kinds": kind if kind is not None else (kinds or TraceSpec.kinds)}
    specs = trace_specs(prompt, subject, settings)
    if kind is not None:
        specs = [replace(spec, kinds=(kind,)) for spec in specs]

    def one(i, spec):
        with applied(lm, edit):
            out = _trace(lm, spec, progress=part(progress, i / len(specs), (i + 1) / len(specs))
                         if progress else None, cache=cache)
        return out[kind] if kind is not None else out

    if isinstance(prompt, (list, tuple)):
        return Batch([one(i, spec) for i, spec in enumerate(specs)], [spec.prompt for spec in specs])
    return one(0, specs[0])


def preview(lm, prompt: str | TraceSpec, subject: str | None = None, kinds=None,
            target: str | None = TraceSpec.target, samples: int = TraceSpec.samples, noise=TraceSpec.noise,
            window: int = TraceSpec.window, seed: int = TraceSpec.seed, edit=None,
            cache: bool = True) -> Traces:
    """The trace's attribution-patching estimate (Nanda 2023; AtP, Kramar et al. 2024): every cell of every
    kind from one backward pass, under a second, instead of a forward per cell. Each panel carries its
    measured agreement with the exact trace over known facts (`.meta["agreement"]`, in its headline and figure
    title), and says where that agreement is poor: then read `trace`."""
    spec = prompt if isinstance(prompt, TraceSpec) else TraceSpec(prompt, subject, target, samples, noise,
                                                                  window, seed)
    with applied(lm, edit):
        return Tracer(lm, spec, cache=cache).preview(kinds)


@with_bar("severing")
def severing(lm, prompt: str | TraceSpec, subject: str | None = None, token: int | None = None,
             target: str | None = TraceSpec.target, samples: int = TraceSpec.samples, noise=TraceSpec.noise,
             seed: int = TraceSpec.seed, edit=None, cache: bool = True, progress=None) -> Severing:
    """ROME's Fig. 4 at `token` (default: the last subject token): the hidden state restored per layer with
    nothing, the MLPs or the attention frozen at their corrupted values in every later layer."""
    spec = prompt if isinstance(prompt, TraceSpec) else TraceSpec(prompt, subject, target, samples, noise,
                                                                  seed=seed)
    with applied(lm, edit):
        return Tracer(lm, spec, cache=cache).severing(token, progress)


@with_bar("average indirect effect")
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


@with_bar("editing")
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


@with_bar("comparing methods")
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


@with_bar("bleed map")
def bleed(lm, method: str, request, hparams: dict | None = None, n_facts: int = 20, relation: str | None = None,
          extra: list[str] | None = None, progress=None) -> BleedMap:
    """The bleed map of one edit: per prompt about another subject (the request's neighbourhood prompts, up to
    `n_facts` known facts of the same relation, `extra` prompts), the measured rise of P(target_new) and the
    update's predicted share s at the token where it is largest (ROME: s(k) = (C^-1 k*)^T k / (C^-1 k*)^T k*)."""
    return bleed_map(lm, method, request, hparams, relation, n_facts, extra, progress)


@with_bar("ripple effects")
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


@with_bar("ripple evaluation")
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


@with_bar("evaluating")
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


@with_bar("sweep")
def sweep(lm, method: str, params, spec: EvalSpec = SWEEP, hparams: dict | None = None, progress=None,
          backend: Backend | None = None) -> Sweep:
    """`method` at every combination of `params` ({name: [values]} or ["name=v1,v2", ...]) on the records `spec`
    names (by default 50 of counterfact-val, the validation set: choose hyperparameters there, report elsewhere);
    each setting's rates, and the Pareto-optimal settings of efficacy, generalization and specificity. A set name
    for `spec` keeps the sweep's other settings."""
    return _sweep(lm, method, params, _spec(spec, SWEEP), hparams, progress=progress, backend=backend)


@with_bar("layer sweep")
def layer_sweep(lm, request, layers="all", method: str = "rome", hparams: dict | None = None,
                trace_kind: str | None = "mlp", samples: int = TraceSpec.samples, progress=None,
                backend: Backend | None = None) -> LayerSweep:
    """Does the traced layer edit best? (Hase et al. 2023): `method` edits the request at each of `layers`, one
    layer at a time, measured on its own prompts, beside the request's `trace_kind` trace on the same layer axis.
    The request needs its true target."""
    return _layer_sweep(lm, request, layers, method, hparams, trace_kind, samples, progress, backend=backend)


@with_bar("lifelong editing")
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


def save_patch(edit, path) -> Path:
    """Write an edit's weight change (an EditReport, an EditResult, a delta dict or a list of them, summed) to
    `path` (.safetensors, with a .json manifest beside it: model, method, requests, hyperparameters, as
    `editkit edit --save-patch` writes), for `load_patch`, the app's patch upload and `editkit edit
    --load-patch`."""
    deltas = _deltas(edit)
    result = getattr(edit, "result", edit)
    manifest = {"model": getattr(edit, "model", None)}
    if isinstance(result, EditResult):
        manifest.update(method=result.method, requests=[r.to_dict() for r in result.requests],
                        hparams=result.info.get("hparams"))
    return _save_patch(path, deltas[0] if len(deltas) == 1 else combined(deltas),
                       {k: v for k, v in manifest.items() if v is not None})


def load_patch(path) -> "Patch":
    """A weight change written by `save_patch` (or the app's download), usable wherever an edit is: `edit=`,
    `applied(lm, patch)`. Its manifest is `.manifest`."""
    delta, manifest = _load_patch(path)
    return Patch(delta, manifest)


class Patch(dict):
    """A loaded weight change (parameter name -> delta) with the manifest it was saved with."""

    def __init__(self, delta: WeightDelta, manifest: dict):
        super().__init__(delta)
        self.manifest = manifest


def ffn_memories(lm, prompt: str, layer: int, position: int = -1, top: int = 10, edit=None) -> MemoryView:
    """The FFN memories (Geva et al. 2021) of `layer` at `position`: the `top` memories by |m_i| ||v_i||, each with
    its value vector's top tokens, and the logit lens before and after each FFN."""
    with applied(lm, edit):
        return memories_at(lm, prompt, layer, position, top)


@with_bar("similarity curves")
def similarity_curves(lm, n: int = 50, mode: str = "residual", prompts: list[str] | None = None, edit=None,
               cache: bool = True, progress=None) -> SimilarityResult:
    """PMET's Fig. 2: per layer, the cosine and top-50 Jaccard similarity of the state entering and leaving the
    attention and the FFN at the last token, over `n` known facts (or `prompts`), with 95% bands."""
    with applied(lm, edit):
        return _similarity(lm, n, prompts=prompts, mode=mode, cache=cache, progress=progress)


__all__ = ["load", "model_folder", "set_progress", "models", "methods", "applied", "activations",
           "intervene", "predict", "logit_lens", "trace", "preview", "severing", "aie", "shipped_aie", "edit",
           "save_patch", "load_patch", "compare", "bleed", "ripple", "ripple_evaluation", "evaluate", "sweep",
           "layer_sweep", "lifelong", "ffn_memories", "similarity_curves"]
