"""The notebook API beyond the recipes, on tiny models: a transformers model object loaded as it is,
activations at any sites for a batch, interventions that rebuild a trace cell and leave nothing behind (nor
act in another thread), batches of prompts, the preview with its measured agreement, patches saved and loaded,
progress bars, figures that draw offline, and the rough edges' messages."""
import re
import threading

import numpy as np
import pytest
import torch

import editkit
from editkit.core.errors import EditkitError
from editkit.model.text import greedy
from editkit.model.tokens import encode

PROMPT, SUBJECT = "The Eiffel Tower is located in", "Eiffel Tower"
OTHER = "Paris is the capital of"
REQUEST = {"prompt": "{} is located in", "subject": "The Eiffel Tower", "target_new": "Rome",
           "target_true": "Paris"}


@pytest.fixture(scope="module")
def lm():
    return editkit.load("tiny-llama", device="cpu", progress=False)


def test_a_transformers_model_object_loads_checked_and_named_by_its_weights(lm):
    own = editkit.load(lm.model, lm.tok._tok)
    assert own.model is lm.model and own.adapter.family == lm.adapter.family
    assert re.fullmatch(r"llama-[0-9a-f]{8}", own.name)  # the config's name with a digest of the weights
    assert editkit.predict(own, PROMPT).predictions == editkit.predict(lm, PROMPT).predictions
    other = editkit.load("tiny-gpt2", device="cpu", progress=False)
    assert editkit.load(other.model, other.tok._tok).name != own.name
    with pytest.raises(EditkitError, match="pass its tokenizer"):
        editkit.load(lm.model)  # built from a config: it was loaded from nowhere
    with pytest.raises(EditkitError, match="keeps its own device and dtype"):
        editkit.load(lm.model, lm.tok._tok, device="cpu")
    with pytest.raises(EditkitError, match="not dict"):
        editkit.load({"model": 1})
    from transformers import BertConfig, BertForMaskedLM

    bert = BertForMaskedLM(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                                      num_attention_heads=2, intermediate_size=32))
    with pytest.raises(EditkitError, match="unsupported architecture 'bert'"):
        editkit.load(bert, lm.tok._tok)


def test_a_cuda_device_on_a_machine_without_one_is_one_message():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(EditkitError, match="device 'cuda' asked for, but"):
        editkit.load("tiny-gpt2", device="cuda")
    with pytest.raises(EditkitError, match="not a device torch knows"):
        editkit.load("tiny-gpt2", device="gpu0")


def test_activations_of_a_batch_are_each_prompts_own(lm):
    acts = editkit.activations(lm, [PROMPT, OTHER], ["resid_pre.1", "attn_out.2", "mlp_out.*"])
    L = lm.adapter.n_layers
    assert acts.sites == ["resid_pre.1", "attn_out.2", *[f"mlp_out.{l}" for l in range(L)]]
    for i, prompt in enumerate([PROMPT, OTHER]):
        alone = lm.runner.read(["attn_out.2"], **encode(lm, prompt))["attn_out.2"][0]
        n = len(acts.tokens[i])
        assert n == alone.shape[0] and int(acts.mask[i].sum()) == n
        torch.testing.assert_close(acts["attn_out.2"][i, :n], alone, rtol=1e-5, atol=1e-5)
        assert acts.probs(int(editkit.predict(lm, prompt).top.token_id))[i] == pytest.approx(
            editkit.predict(lm, prompt).top.prob, rel=1e-4)
    # resid_post.l = resid_pre.l + what attention and the MLP write: the sites read the same run
    two = editkit.activations(lm, PROMPT, ["resid_pre.1", "attn_write.1", "mlp_write.1", "resid_post.1"])
    parts = two["resid_pre.1"] + two["attn_write.1"] + two["mlp_write.1"]
    torch.testing.assert_close(two["resid_post.1"], parts, rtol=1e-4, atol=1e-4)
    table = acts.to_frame()
    assert len(table) == sum(len(t) for t in acts.tokens) * len(acts.sites)
    assert acts.to_frame("mlp_out.0").shape == (sum(len(t) for t in acts.tokens), 3 + lm.adapter.d_model)
    back = editkit.Activations.from_json(acts.to_json())
    assert back.sites == acts.sites and torch.allclose(back["mlp_out.0"], acts["mlp_out.0"])
    for bad, message in (("mlp_out.99", "out of range"), ("mlp.3", "unknown site kind")):
        with pytest.raises(EditkitError, match=message):
            editkit.activations(lm, PROMPT, [bad])
    with pytest.raises(EditkitError, match="was not read"):
        acts["resid_post.0"]


def cell_by_hand(lm, tr, kind: str, site: str) -> tuple[float, float]:
    """One cell of a trace (its peak) rebuilt with activations and an intervention: (by hand, the trace's)."""
    r = tr[kind]
    token, layer, score = r.peak()
    b, e = r.subject_range
    L, d = lm.adapter.n_layers, lm.adapter.d_model
    noise = torch.from_numpy(np.random.RandomState(r.seed).randn(r.samples, e - b, d)).float() * r.noise_scale
    window = [layer] if kind == "hidden" else range(max(0, layer - r.window // 2),
                                                    min(L, layer - (-r.window // 2)))
    clean = editkit.activations(lm, PROMPT, [f"{site}.{j}" for j in window])
    with editkit.intervene(lm) as iv:
        iv.add("embed", noise, positions=range(b, e))
        for j in window:
            iv.patch(f"{site}.{j}", clean[f"{site}.{j}"][0, token], positions=token)
        restored = editkit.activations(lm, [PROMPT] * r.samples, [])
    return float(restored.probs(r.answer_id).mean()), score


def test_an_intervention_rebuilds_a_trace_cell_and_leaves_nothing_behind(lm):
    tr = editkit.trace(lm, PROMPT, SUBJECT, samples=3, window=3, cache=False)
    for kind, site in (("hidden", "resid_post"), ("mlp", "mlp_out"), ("attn", "attn_out")):
        by_hand, traced = cell_by_hand(lm, tr, kind, site)
        assert by_hand == pytest.approx(traced, abs=1e-6), kind
        assert abs(by_hand - tr[kind].low_score) > 1e-4  # the restoration moved p: the check can fail
    before = editkit.activations(lm, PROMPT, ["mlp_out.1"])
    after_block = editkit.activations(lm, PROMPT, ["mlp_out.1"])
    assert torch.equal(before["mlp_out.1"], after_block["mlp_out.1"])
    with pytest.raises(EditkitError, match="boom|mlp_out.1"):
        with editkit.intervene(lm) as iv:
            iv.ablate("mlp_out.1")
            raise EditkitError("boom")
    assert torch.equal(editkit.activations(lm, PROMPT, ["mlp_out.1"])["mlp_out.1"], before["mlp_out.1"])


def test_an_intervention_acts_only_in_its_own_thread(lm):
    clean = editkit.predict(lm, PROMPT, k=3)
    seen, go, done = {}, threading.Event(), threading.Event()

    def other():
        go.wait(10)
        seen["other"] = editkit.predict(lm, PROMPT, k=3)
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with editkit.intervene(lm) as iv:
        iv.ablate("mlp_out.0")
        go.set()
        done.wait(30)
        seen["mine"] = editkit.predict(lm, PROMPT, k=3)
    thread.join()
    assert seen["other"] == clean and seen["mine"] != clean


def test_inside_an_intervention_traces_edits_and_misfits_are_refused(lm):
    with editkit.intervene(lm) as iv:
        iv.patch("mlp_out.1", torch.zeros(lm.adapter.d_model), positions=2)
        with pytest.raises(EditkitError, match="caches hold the model's numbers without your interventions"):
            editkit.trace(lm, PROMPT, SUBJECT, samples=2)
        with pytest.raises(EditkitError, match="caches hold"):
            editkit.edit(lm, "rome", REQUEST, progress=False)
        with pytest.raises(EditkitError, match="a generation .* runs the model in pieces"):
            greedy(lm, PROMPT, 2)
    with editkit.intervene(lm) as iv:
        iv.add("resid_post.1", torch.ones(lm.adapter.d_model))  # one vector everywhere: fine in a generation
        assert isinstance(greedy(lm, PROMPT, 2), str)
    with editkit.intervene(lm) as iv:
        iv.patch("mlp_out.1", torch.zeros(3, 5), positions=[1, 2])
        misfit = r"patch at mlp_out.1, positions \[1, 2\], values \[3, 5\]: does not fit"
        with pytest.raises(EditkitError, match=misfit):
            editkit.predict(lm, PROMPT)
    with editkit.intervene(lm) as iv:
        iv.apply("mlp_out.1", lambda h: h[:, :1])
        with pytest.raises(EditkitError, match="must return a tensor of the shape it was given"):
            editkit.predict(lm, PROMPT)
    with pytest.raises(EditkitError, match="inside the block"):
        editkit.intervene(lm).ablate("mlp_out.1")


def test_lists_of_prompts_give_batches_and_one_prompt_functions_say_so(lm, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    batch = editkit.predict(lm, [PROMPT, OTHER], k=2)
    assert isinstance(batch, editkit.Batch)
    assert batch == [editkit.predict(lm, p, k=2) for p in (PROMPT, OTHER)]
    assert list(batch.to_frame()["prompt"]) == [PROMPT] * 2 + [OTHER] * 2
    lenses = editkit.logit_lens(lm, [PROMPT, OTHER], k=1)
    assert lenses[1] == editkit.logit_lens(lm, OTHER, k=1)
    traces = editkit.trace(lm, [PROMPT, OTHER], [SUBJECT, "Paris"], kind="hidden", samples=2)
    assert [t.kind for t in traces] == ["hidden", "hidden"]
    assert traces[0].scores == editkit.trace(lm, PROMPT, SUBJECT, kind="hidden", samples=2).scores
    assert "text/html" in traces._repr_mimebundle_()
    with pytest.raises(EditkitError, match="needs a list of as many subjects"):
        editkit.trace(lm, [PROMPT, OTHER], SUBJECT)
    with pytest.raises(EditkitError, match="one prompt .* not a list of 2"):
        editkit.severing(lm, [PROMPT, OTHER], SUBJECT)
    with pytest.raises(EditkitError, match="one prompt .* not a list of 2"):
        editkit.ffn_memories(lm, [PROMPT, OTHER], 1)
    with pytest.raises(EditkitError, match="the list of prompts is empty"):
        editkit.predict(lm, [])


def test_the_three_kinds_of_one_run_say_its_time_once(lm):
    tr = editkit.trace(lm, PROMPT, SUBJECT, samples=2, window=2, cache=False)
    run = tr["mlp"].meta["run_s"]
    assert all(r.meta["together"] == ["hidden", "mlp", "attn"] for r in tr.values())
    assert sum(r.seconds for r in tr.values()) == pytest.approx(run, rel=1e-2, abs=2e-3)
    assert tr.seconds == pytest.approx(tr["mlp"].meta["setup_s"] + run, rel=1e-2, abs=2e-3)
    assert tr["attn"].timing() == f"computed in one run of {run:.1f} s with hidden, mlp"


def test_the_preview_says_how_far_it_agrees_and_where_it_is_poor(lm, tmp_path, monkeypatch):
    import json

    from editkit.tracing import agreement

    preview = editkit.preview(lm, PROMPT, SUBJECT, samples=2, window=2, cache=False)
    assert all(r.estimate and r.meta["agreement"]["poor"] is None for r in preview.values())
    assert "not measured on tiny-llama" in preview["mlp"].headline()
    good = {"spearman": 0.9, "pearson": 0.9, "top10_overlap": 8, "peak_same_token": True,
            "peak_same_cell": True}
    poor = {"spearman": 0.4, "pearson": 0.47, "top10_overlap": 1, "peak_same_token": False,
            "peak_same_cell": False}
    rows = [{"panels": {"hidden": good, "mlp": poor}}]
    shipped = {"model": lm.name, "facts": 1, "panels": agreement.summarize(rows, ["hidden", "mlp"])}
    (tmp_path / f"trace-preview-{lm.name}.json").write_text(json.dumps(shipped))
    monkeypatch.setattr(agreement, "SHIPPED", tmp_path)
    preview = editkit.preview(lm, PROMPT, SUBJECT, kinds=["hidden", "mlp"], samples=2, window=2, cache=False)
    assert preview["mlp"].meta["agreement"]["poor"] and not preview["hidden"].meta["agreement"]["poor"]
    assert "poor on this panel" in preview["mlp"].headline()
    assert "POOR" in preview["mlp"].figure().layout.title.text
    assert "ρ 0.90 on 1 facts" in preview["hidden"].figure().layout.title.text
    exact = torch.rand(6, 4)
    same = agreement.compare(exact, exact, 1)
    assert same["spearman"] == pytest.approx(1) and same["top10_overlap"] == 10 and same["peak_same_cell"]
    assert agreement.compare(-exact, exact, 1)["top10_overlap"] < 10


def test_a_patch_saved_and_loaded_edits_as_the_edit_did(lm, tmp_path):
    report = editkit.edit(lm, "rome", REQUEST, progress=False)
    path = editkit.save_patch(report, tmp_path / "rome")
    assert path.suffix == ".safetensors" and path.with_suffix(".json").exists()
    patch = editkit.load_patch(path)
    assert patch.manifest["method"] == "rome" and patch.manifest["model"] == lm.name
    assert editkit.predict(lm, PROMPT, edit=patch) == editkit.predict(lm, PROMPT, edit=report)
    assert editkit.predict(lm, PROMPT, edit=patch) != editkit.predict(lm, PROMPT)


def test_progress_bars_follow_the_switch(lm, monkeypatch):
    from editkit.core import progress

    calls = []

    class Fake:  # the bar's life, without drawing
        def __init__(self, what):
            calls.append(what)

        def __call__(self, fraction, message):
            calls.append(fraction)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            calls.append("closed")

    monkeypatch.setattr(progress, "Bar", Fake)
    editkit.set_progress(True)
    try:
        editkit.trace(lm, PROMPT, SUBJECT, kind="hidden", samples=2, cache=False)
        assert calls[0] == "tracing" and calls[-1] == "closed" and calls[-2] == pytest.approx(1.0)
        given = []
        editkit.trace(lm, PROMPT, SUBJECT, kind="hidden", samples=2, cache=False,
                      progress=lambda f, m: given.append(f))  # a callback given is used as it is
        assert given and calls.count("tracing") == 1
        editkit.trace(lm, PROMPT, SUBJECT, kind="hidden", samples=2, cache=False, progress=False)
        editkit.set_progress(False)
        editkit.trace(lm, PROMPT, SUBJECT, kind="hidden", samples=2, cache=False)
        assert calls.count("tracing") == 1
    finally:
        editkit.set_progress(None)
    monkeypatch.setenv("EDITKIT_PROGRESS", "0")
    assert not progress.bars_on()
    monkeypatch.setenv("EDITKIT_PROGRESS", "1")
    assert progress.bars_on()


def test_first_use_says_what_it_computes_and_how_long(lm, tmp_path, monkeypatch):
    from editkit.editing.defaults import load_hparams
    from editkit.editing.run import prepare_first_use

    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    said = []
    hp = load_hparams("rome", lm, {"mom2_n_tokens": 200})
    assert prepare_first_use(lm, hp, lambda f, m: said.append(m))
    assert said[0].startswith("first use (once per model): the second moment C = E[k kᵀ] of the FFN keys")
    assert "200 WikiText-2 tokens" in said[0] and said[-1].startswith("first use: ready in")


def test_a_figure_carries_plotly_js_once_and_never_a_cdn(lm, monkeypatch):
    from editkit.figures import notebook

    monkeypatch.setitem(notebook._SENT, "plotlyjs", False)
    tr = editkit.trace(lm, PROMPT, SUBJECT, kind="hidden", samples=2, cache=False)
    first, second = tr._repr_mimebundle_(), tr._repr_mimebundle_()
    assert notebook.MIMETYPE in first and first[notebook.MIMETYPE]["data"][0]["type"] == "heatmap"
    assert len(first["text/html"]) > 1_000_000 and "plotly.js v" in first["text/html"][:2_000_000]
    assert len(second["text/html"]) < 200_000 and "plotly.js v" not in second["text/html"]
    for bundle in (first, second):
        assert not re.search(r"<script[^>]*\bsrc=", bundle["text/html"])  # every script inline: no network
    assert notebook.RENDERER in __import__("plotly.io", fromlist=["renderers"]).renderers


def test_the_api_lists_every_function_it_defines():
    import inspect

    import editkit.api as api

    defined = {name for name, fn in inspect.getmembers(api, inspect.isfunction)
               if fn.__module__ == "editkit.api" and not name.startswith("_")}
    assert defined == set(api.__all__) and set(api.__all__) == set(editkit._API)
