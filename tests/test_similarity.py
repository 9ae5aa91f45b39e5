"""MHSA vs FFN similarity curves (PMET Fig. 2): Jaccard by hand, the residual identities behind the input/output
definitions on every tiny family, the CLI, the page, and the embedded model."""
import json
import re
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from editkit.cli import main
from editkit.core.errors import CacheWarning, EditkitError
from editkit.similarity import (
    SimilarityResult,
    _jaccard_rows,
    cache_path,
    capture_states,
    component_states,
    fact_prompts,
    jaccard,
    per_prompt,
    similarity,
)

APP = str(Path(__file__).resolve().parent.parent / "app.py")
PROMPTS = ["The Eiffel Tower is located in the city of", "Danielle Darrieux's mother tongue is",
           "Toko Yasuda plays the", "The capital of Japan is", "Hi"]


@pytest.fixture(autouse=True)
def _cache(request, tmp_path, monkeypatch):
    """Tiny-model results go to a fresh cache; the embedded model keeps the real one (its converted weights and
    predicted facts live there)."""
    if "gemma" not in request.fixturenames:
        monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))


def test_jaccard_hand_cases():
    assert jaccard([1, 2, 3], [3, 2, 1]) == 1
    assert jaccard([1, 2], [3, 4]) == 0
    assert jaccard([1, 2, 3, 4], [3, 4, 5]) == pytest.approx(2 / 5)  # {3,4} / {1,...,5}
    assert jaccard([], []) == 1
    a, b = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[4, 3, 9, 8]])
    assert _jaccard_rows(a, a).item() == 1 and _jaccard_rows(a, b).item() == pytest.approx(2 / 6)  # batched form


def test_states_obey_the_residual_identities(tiny):
    """h_l = h_{l-1} + a_l + m_l (both block types), block l+1 reads h_l, and each definition's pieces add up."""
    s = capture_states(tiny, PROMPTS)
    L, d = tiny.adapter.n_layers, tiny.adapter.d_model
    assert s["h_in"].shape == (len(PROMPTS), L, d)
    torch.testing.assert_close(s["h_out"], s["h_in"] + s["attn"] + s["mlp"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(s["h_in"][:, 1:], s["h_out"][:, :-1], atol=0, rtol=0)
    c = component_states(s, tiny.adapter.family.parallel)
    torch.testing.assert_close(c["mhsa_out"], c["mhsa_in"] + s["attn"])
    if tiny.adapter.family.parallel:  # both read h_{l-1}
        torch.testing.assert_close(c["ffn_in"], s["h_in"])
        torch.testing.assert_close(c["ffn_out"], s["h_in"] + s["mlp"])
    else:  # FFN output (captured block output) = FFN input + the added term
        torch.testing.assert_close(c["ffn_in"], c["mhsa_out"])
        torch.testing.assert_close(c["ffn_out"], c["ffn_in"] + s["mlp"], atol=1e-5, rtol=1e-5)
    raw = component_states(s, tiny.adapter.family.parallel, mode="raw")
    assert raw["mhsa_out"] is s["attn"] and raw["ffn_out"] is s["mlp"]


def test_batching_and_padding_do_not_change_values(tiny):
    """The last real token of a right-padded batch gives the same numbers as one prompt at a time."""
    together = per_prompt(tiny, PROMPTS)
    alone = [per_prompt(tiny, [p]) for p in PROMPTS]
    for name, v in together.items():
        torch.testing.assert_close(v, torch.cat([a[name] for a in alone]), atol=1e-4, rtol=1e-4)


def test_similarity_result_on_every_family(tiny):
    r = similarity(tiny, prompts=PROMPTS, batch_size=2)
    L = tiny.adapter.n_layers
    assert r.n == len(PROMPTS) and r.facts == "custom" and r.layers == list(range(L)) and not r.cached
    assert ("parallel" in r.definition) == tiny.adapter.family.parallel
    for name, (lo, hi) in (("mhsa_cos", (-1, 1)), ("ffn_cos", (-1, 1)), ("mhsa_jaccard", (0, 1)),
                           ("ffn_jaccard", (0, 1))):
        m = getattr(r, name)
        assert len(m["mean"]) == len(m["low"]) == len(m["high"]) == L
        for mean, low, high in zip(m["mean"], m["low"], m["high"]):
            assert lo <= low <= mean + 1e-6 and mean - 1e-6 <= high <= hi
    again = similarity(tiny, prompts=PROMPTS)  # served from the disk cache
    assert again.cached and again.mhsa_cos == r.mhsa_cos and again.ffn_jaccard == r.ffn_jaccard


def test_raw_mode_corrupt_cache_and_errors(tiny_by_name, tmp_path, capsys):
    lm = tiny_by_name("tiny-llama")
    r = similarity(lm, prompts=PROMPTS[:2], mode="raw")
    assert "raw" in r.definition and r.mode == "raw"
    files = list((tmp_path / "similarity").glob("*.json"))
    assert len(files) == 1
    files[0].write_text("{not json")
    with pytest.warns(CacheWarning, match="kept as"):
        rebuilt = similarity(lm, prompts=PROMPTS[:2], mode="raw")
    assert not rebuilt.cached and rebuilt.mhsa_cos == r.mhsa_cos
    files[0].write_text("[")  # the CLI says the same in one line of its own
    assert main(["similarity", "--model", "tiny-llama", "--prompt", PROMPTS[0], "--prompt", PROMPTS[1],
                 "--mode", "raw", "--json"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"^\[editkit\] warning: cache entry .*similarity.* could not be read .*kept as", err, re.M), err
    with pytest.raises(EditkitError):
        similarity(lm, prompts=PROMPTS, mode="sideways")
    with pytest.raises(EditkitError):
        similarity(lm, prompts=[""])
    with pytest.raises(EditkitError, match="predicts none"):
        similarity(lm, facts="known", n=5)  # a random model knows no facts


def test_cli_json(capsys):
    assert main(["similarity", "--model", "tiny-neox", "--prompt", PROMPTS[0], "--prompt", PROMPTS[1], "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 2 and out["parallel"] and len(out["ffn_jaccard"]["mean"]) == 4
    assert main(["similarity", "--model", "tiny-gpt2", "--facts", "all", "--n", "3"]) == 0  # human-readable
    assert "MHSA cos" in capsys.readouterr().out
    assert main(["similarity", "--model", "tiny-gpt2", "--facts", "all", "--n", "0", "--json"]) == 2  # clear error


def test_page_runs_on_tiny_gpt2():
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/attention_vs_ffn.py").run()
    assert not at.exception
    at.slider(key="sim_n").set_value(10)
    at.radio(key="sim_facts").set_value("all")
    at.button(key="sim_compute").click().run()
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 2
    assert at.session_state["sim_result"].n == 10
    at.radio(key="sim_mode").set_value("raw").run()  # earlier result kept across reruns
    assert not at.exception and len(at.get("plotly_chart")) == 2


def test_embedded_model_curves(gemma, capsys):
    """18 layers, values in range; the CLI returns the library's numbers (same function, same cache)."""
    path, _ = cache_path(gemma.name, "known", 20, "residual", fact_prompts(gemma, "known", 20))
    path.unlink(missing_ok=True)  # compute, not replay
    r = similarity(gemma, n=20)
    assert not r.cached and path.exists()
    assert r.n == 20 and r.facts == "known" and len(r.layers) == 18 and "post_attention_layernorm" in r.definition
    for name in ("mhsa_cos", "ffn_cos"):
        assert all(-1 <= v <= 1 for v in getattr(r, name)["mean"])
    for name in ("mhsa_jaccard", "ffn_jaccard"):
        assert all(0 <= v <= 1 for v in getattr(r, name)["mean"])
    assert main(["similarity", "--model", "gemma-3-270m", "--n", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cached"] and out["mhsa_cos"] == r.mhsa_cos and out["ffn_jaccard"] == r.ffn_jaccard


def test_the_conclusion_says_which_sub_layer_changes_the_state_more():
    """One sentence per metric: layers where the bands are apart, by which side, the rest within noise, the gap."""
    band = lambda means, w: {"mean": means, "low": [m - w for m in means], "high": [m + w for m in means]}  # noqa
    r = SimilarityResult("m", "llama", False, "residual", "known", 10, 50, "", "", [0, 1, 2, 3],
                         band([0.50, 0.90, 0.80, 0.95], 0.02), band([0.90, 0.91, 0.45, 0.70], 0.02),
                         band([0.5] * 4, 0.1), band([0.5] * 4, 0.1))
    text = r.conclusion("cos")
    assert text.startswith("By cosine similarity (lower: the sub-layer changes the state more; within noise: 95% "
                           "bands overlap), the attention changes the state more at 1 layer (1), the FFN at 2 "
                           "layers (3-4), the two are within noise at 1 layer (2) of 4;")
    assert text.endswith("the largest gap is at layer 1: attention 0.50 against FFN 0.90.")
    assert "the two are within noise at 4 layers (1-4) of 4" in r.conclusion("jaccard")
    assert "top-50 Jaccard" in r.conclusion("jaccard")
