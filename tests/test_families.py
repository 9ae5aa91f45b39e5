"""Model types that reuse another family's layout (models.TINY_TYPES: Mistral, Qwen2, Qwen3, Phi-3, StableLM, OLMo)
pass the identities every family passes (the adapter's maps, restoring every state, each method's update), and the
load-time layout check (Runner.check_layout) refuses a model type mapped onto a family it does not fit.

The identities are the ones tests/test_adapters.py, test_tracing.py, test_editing.py, test_alphaedit.py and
test_ultraedit.py run on one model per family (models.TINY); they are imported under names pytest does not collect
twice."""
import pytest
import torch

from editkit.core.errors import EditkitError
from editkit.model import adapters
from editkit.model.adapters import adapter_for
from editkit.model.loading import TINY, TINY_TYPES, load_model, tiny_config
from editkit.tracing import TraceSetup, TraceSpec, parse_noise
from test_adapters import test_down_weight_maps_key_to_value as down_weight_maps_key_to_value
from test_adapters import test_logit_lens_last_layer_equals_model_logits as logit_lens_equals_logits
from test_adapters import test_patching_own_clean_value_is_identity as patching_is_identity
from test_alphaedit import test_alphaedit_on_every_family as alphaedit_identities
from test_editing import test_batch_updates_satisfy_normal_equations as batch_normal_equations
from test_editing import test_rome_makes_W_k_equal_v as rome_identity
from test_tracing import test_fast_engine_equals_reference as fast_equals_reference
from test_tracing import test_restoring_everything_reproduces_clean_run as restoring_everything_is_clean
from test_ultraedit import test_ultraedit_on_every_family as ultraedit_identities

PROMPT, SUBJECT = "The Space Needle is in downtown Seattle", "Space Needle"


@pytest.fixture(params=TINY_TYPES, scope="module")
def tiny_type(request):
    return load_model(request.param, device="cpu")


def test_each_type_maps_onto_a_family_and_its_config(tiny_type):
    a = tiny_type.adapter
    assert a.family.name in adapters.FAMILIES and a.n_layers == 4 and a.d_model == 64 and a.d_ff == 256
    assert adapters.MODEL_TYPES[tiny_type.model.config.model_type] == a.family.name
    assert set(TINY).isdisjoint(TINY_TYPES)


@pytest.mark.parametrize("part", ["block", "attn", "mlp", "down_proj"])
def test_adapter_identities(tiny_type, part):
    patching_is_identity(tiny_type, part)
    down_weight_maps_key_to_value(tiny_type)
    logit_lens_equals_logits(tiny_type)


@pytest.mark.parametrize("kind", ["hidden", "mlp", "attn"])
def test_tracing_identities(tiny_type, kind):
    setup = (tiny_type, TraceSetup.build(tiny_type, TraceSpec(PROMPT, SUBJECT, samples=3, noise=parse_noise("3s"))))
    fast_equals_reference(setup, kind)
    restoring_everything_is_clean(setup)


def test_every_method_solves_its_equations(tiny_type):
    rome_identity(tiny_type, rrome=True)
    for method in ("memit", "pmet"):
        batch_normal_equations(tiny_type, method)
    alphaedit_identities(tiny_type)
    ultraedit_identities(tiny_type)


def test_stablelm_parallel_residual_shares_the_input_norm():
    """StableLM with use_parallel_residual computes x + attn(ln1(x)) + mlp(ln1(x)): the adapter says parallel and
    the MLP reads the input norm (as GPT-NeoX's flag), and the layout check holds."""
    config = tiny_config("tiny-stablelm")
    config.use_parallel_residual = True
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    a = adapter_for(model)
    assert a.family.parallel and a.family.ln_mlp == a.family.ln_attn
    assert not adapter_for(AutoModelForCausalLM.from_config(tiny_config("tiny-stablelm"))).family.parallel


def _folder(tmp_path, config, name):
    from transformers import AutoModelForCausalLM

    from editkit.model.loading import tiny_tokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    for p in model.parameters():
        if p.dim() >= 2:
            p.data.normal_(0.0, 0.2)
    model.save_pretrained(tmp_path / name)
    tiny_tokenizer().save_pretrained(tmp_path / name)
    return str(tmp_path / name)


@pytest.mark.parametrize("tweak", [
    {"residual_multiplier": 0.5},  # Granite scales what each sub-layer writes: h + 0.5 * attn(...)
    {"logits_scaling": 4.0},  # Granite divides the logits: the runner's projection would not be the model's
])
def test_a_type_mapped_onto_a_family_it_does_not_fit_is_refused(tmp_path, monkeypatch, tweak):
    """Granite has Llama's module names but multiplies what each block writes and divides its logits. Mapped onto
    the Llama family by mistake, loading refuses it with the numbers instead of tracing and editing it wrongly; with
    the multipliers at 1 (Llama's arithmetic) the same mapping loads."""
    from transformers import GraniteConfig

    common = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=128, max_position_embeddings=256, vocab_size=2048, bos_token_id=0,
                  eos_token_id=0, pad_token_id=0, embedding_multiplier=1.0, attention_multiplier=0.25)
    monkeypatch.setitem(adapters.MODEL_TYPES, "granite", "llama")
    plain = _folder(tmp_path, GraniteConfig(**common, residual_multiplier=1.0, logits_scaling=1.0), "plain")
    assert load_model(plain, device="cpu").adapter.family.name == "llama"
    folder = _folder(tmp_path, GraniteConfig(**{**common, "residual_multiplier": 1.0, "logits_scaling": 1.0,
                                                **tweak}), "scaled")
    with pytest.raises(EditkitError, match="adapter does not fit this model") as err:
        load_model(folder, device="cpu")
    assert "relative error" in str(err.value)


def test_unsupported_type_names_what_to_add():
    from transformers import AutoModelForCausalLM, BloomConfig

    model = AutoModelForCausalLM.from_config(BloomConfig(n_layer=2, hidden_size=64, n_head=4, vocab_size=256))
    with pytest.raises(EditkitError, match="unsupported architecture 'bloom'.*Add a Family"):
        adapter_for(model)


def test_every_family_has_a_tiny_model():
    """Each adapter family is exercised by a tiny model of the `tiny` fixture, and each declared model type by a
    tiny model of TINY or TINY_TYPES."""
    seen = {load_model(n, device="cpu").adapter.family.name for n in TINY}
    assert seen == set(adapters.FAMILIES)
    types = {tiny_config(n).model_type for n in (*TINY, *TINY_TYPES)}
    assert set(adapters.MODEL_TYPES) - types <= {"gemma3"}  # the multimodal wrapper's text model is gemma3_text
