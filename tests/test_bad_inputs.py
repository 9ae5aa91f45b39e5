"""Every page, every bad input (Streamlit AppTest on tiny-gpt2, with a private cache folder).

Each page first computes a good result. Then every bad input is tried in turn: empty, whitespace-only,
10,000-character, unicode/RTL/emoji and NUL-containing prompts; a subject absent or repeated; multi-token and empty
targets; samples, window, layer and position out of range or over the server's limits; malformed JSON and NaN
hyperparameters; corrupt patch and cache files; unknown and unreachable model ids. Each case checks that the page
raised no exception, that a bad input shows a clear message (never "Something went wrong"), that the earlier
result is still there, and the last case of each page computes a good result again (the page stays usable).
`CASES` counts the inputs tried on each page.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from editkit.model.loading import load_model
from editkit.model.weights import patch_bytes

APP = str(Path(__file__).resolve().parent.parent / "app.py")
MODEL = "tiny-gpt2"
LONG = ("The tower is tall and old. " * 400)[:10_000]
UNICODE = "مرحبا بالعالم، שלום עולם, 世界 🙂🚀 naïve café"
NUL = "The Eiffel Tower\x00 is in the city of"
EMPTY_PROMPT = "the prompt is empty"
TOO_LONG = r"the prompt .*has [\d,]+ tokens.*the limit is \d+"
PROMPTS = [("empty", "", EMPTY_PROMPT), ("whitespace", " \t\n  ", EMPTY_PROMPT), ("10k chars", LONG, TOO_LONG),
           ("unicode-rtl-emoji", UNICODE, None), ("nul", NUL, "NUL character")]
MODEL_IDS = [("unknown folder", "./no/such/folder", "no model folder"),
             ("unreachable hub id", "nobody-xyz/no-such-model", "could not load model"),
             ("nul in model id", "gpt2\x00", "printable characters"),
             ("10k-char model id", "m" * 10_000, "printable characters")]


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    """Caches in a private folder: the corrupt-file cases never touch the shared cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("EDITKIT_CACHE", str(tmp_path_factory.mktemp("cache")))
    mp.delenv("EDITKIT_LIMITS", raising=False)
    yield
    mp.undo()


def open_page(page: str, timeout: int = 600) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.session_state["model_choice"] = MODEL
    if page != "home":
        at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, at.exception
    return at


def click(at: AppTest, label: str) -> AppTest:
    buttons = [b for b in at.button if b.label == label]
    assert buttons, f"no button {label!r}: {[b.label for b in at.button]}"
    return buttons[0].click().run()


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def assert_ok(at: AppTest, expect: str | None) -> None:
    """No exception and no "Something went wrong"; a bad input shows a red box matching `expect`."""
    assert not at.exception, [e.value for e in at.exception]
    errs = errors(at)
    assert not any("Something went wrong" in e for e in errs), errs
    if expect is None:
        assert not errs, errs
    else:
        assert any(re.search(expect, e) for e in errs), (expect, errs)


def kept(at: AppTest, key: str, before) -> None:
    assert at.session_state[key] == before if key in at.session_state else before is None


# --- home --------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def home():
    at = open_page("home")
    assert at.session_state["home_result"][0].prompt.startswith("The Eiffel Tower")
    return at


@pytest.mark.parametrize("name,prompt,expect", PROMPTS, ids=[p[0] for p in PROMPTS])
def test_home_prompts(home, name, prompt, expect):
    before = home.session_state["home_result"]
    home.text_input(key="home_prompt").set_value(prompt).run()
    assert_ok(home, expect)
    if expect:
        kept(home, "home_result", before)
        assert len(home.dataframe) == 1, "the earlier prediction stays on the page"
    else:
        assert home.session_state["home_result"][0].prompt == prompt
    home.text_input(key="home_prompt").set_value("The Eiffel Tower is located in the city of").run()
    assert_ok(home, None)


# --- every page: model ids, corrupt and foreign patches ------------------------------------------------------------
PAGES = ["home", "causal_tracing", "ffn_memories", "edit_compare", "attention_vs_ffn"]


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("name,model_id,expect", MODEL_IDS, ids=[m[0] for m in MODEL_IDS])
def test_bad_model_ids(page, name, model_id, expect):
    at = open_page(page)
    at.selectbox(key="model_choice").set_value("other: hub id, folder or GGUF file").run()
    assert_ok(at, None)
    at.text_input(key="model_other").set_value(model_id).run()
    assert_ok(at, expect)
    at.selectbox(key="model_choice").set_value(MODEL).run()  # back to a good model: the page works again
    assert_ok(at, None)


def _patches():
    lm = load_model(MODEL, device="cpu")
    name = lm.adapter.param_name("down_proj", 1)
    shape = dict(lm.model.named_parameters())[name].shape
    good = patch_bytes({name: torch.full(shape, 1e-4)}, {"model": MODEL})
    return [
        ("garbage bytes", b"this is not a safetensors file" * 10, "not a readable safetensors patch"),
        ("truncated", good[: len(good) // 2], "not a readable safetensors patch"),
        ("empty file", b"", "is empty"),
        ("other model's layer", patch_bytes({"transformer.h.99.mlp.c_proj.weight": torch.zeros(2, 2)}, {}),
         "this model does not have"),
        ("wrong shape", patch_bytes({name: torch.zeros(3, 3)}, {}), "has shape"),
        ("NaN values", patch_bytes({name: torch.full(shape, float("nan"))}, {}), "not finite"),
        ("made for another model", patch_bytes({name: torch.zeros(shape)}, {"model": "gemma-3-270m"}),
         "made for gemma-3-270m"),
    ]


PATCHES = _patches()


@pytest.mark.parametrize("name,data,expect", PATCHES, ids=[p[0] for p in PATCHES])
def test_corrupt_patch_uploads(home, name, data, expect):
    home.file_uploader(key="edits_upload").set_value((f"{name}.safetensors", data, "application/octet-stream")).run()
    assert_ok(home, expect)
    assert home.session_state["_editkit_edits"][MODEL] == []  # nothing was applied
    home.file_uploader(key="edits_upload").set_value(None).run()


def test_a_good_patch_is_kept_and_used_then_cleared(home):
    lm = load_model(MODEL, device="cpu")
    name = lm.adapter.param_name("down_proj", 1)
    shape = dict(lm.model.named_parameters())[name].shape
    before = home.session_state["home_result"][0]
    data = patch_bytes({name: torch.full(shape, 0.05)}, {"model": MODEL})
    home.file_uploader(key="edits_upload").set_value(("mine.safetensors", data, "application/octet-stream")).run()
    assert_ok(home, None)
    assert len(home.session_state["_editkit_edits"][MODEL]) == 1
    assert home.session_state["home_result"][0] != before  # the prediction uses the kept edit
    click(home, "Clear")
    assert_ok(home, None)
    assert home.session_state["home_result"][0] == before


# --- causal tracing --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tracing():
    at = open_page("causal_tracing")
    at.number_input(key="trace_samples").set_value(2)
    click(at, "Trace")
    assert_ok(at, None)
    assert len(at.get("plotly_chart")) == 4
    return at


def _trace_with(at, **values):
    defaults = {"trace_prompt": "The Space Needle is in downtown", "trace_subject": "Space Needle",
                "trace_target": "", "trace_noise": "3s"}
    for key, value in {**defaults, **values}.items():
        at.text_input(key=key).set_value(value)
    return click(at, "Trace")


TRACE_CASES = [(f"prompt {n}", {"trace_prompt": p, **({"trace_subject": "世界"} if n.startswith("unicode") else {})},
                e) for n, p, e in PROMPTS] + [
    ("subject absent", {"trace_subject": "Tokyo"}, "does not occur in the prompt"),
    ("subject repeated", {"trace_prompt": "Paris is Paris, the capital of", "trace_subject": "Paris"}, None),
    ("subject empty (guessed)", {"trace_subject": ""}, None),
    ("subject NUL", {"trace_subject": "Space\x00"}, "does not occur in the prompt"),
    ("target multi-token", {"trace_target": "San Francisco Bay Area"}, None),
    ("target whitespace", {"trace_target": "   "}, None),
    ("noise text", {"trace_noise": "loud"}, "noise must be a number"),
    ("noise NaN", {"trace_noise": "nan"}, "noise must be a number"),
    ("noise negative", {"trace_noise": "-3s"}, "noise must be a number"),
    ("noise overflow", {"trace_noise": "1e400"}, "positive and finite"),
]


@pytest.mark.parametrize("name,values,expect", TRACE_CASES, ids=[c[0] for c in TRACE_CASES])
def test_tracing_inputs(tracing, name, values, expect):
    before = tracing.session_state["trace_state"]
    _trace_with(tracing, **values)
    assert_ok(tracing, expect)
    if expect:
        kept(tracing, "trace_state", before)
    assert len(tracing.get("plotly_chart")) == 4, "results (earlier or new) stay on the page"


def test_tracing_numbers_out_of_range(tracing):
    """The widgets refuse values outside their range (Streamlit keeps the last valid value); values inside the
    widget's range but over the server's limits are clear errors."""
    tracing.number_input(key="trace_samples").set_value(10_000)
    tracing.number_input(key="trace_window").set_value(0)
    _trace_with(tracing)
    assert_ok(tracing, None)
    assert 1 <= tracing.number_input(key="trace_samples").value <= 100
    assert 1 <= tracing.number_input(key="trace_window").value <= 40
    before = tracing.session_state["trace_state"]  # the trace above ran with the widgets' valid values
    tracing.number_input(key="trace_samples").set_value(80)
    _trace_with(tracing)
    assert_ok(tracing, "80 noise samples is over this server's limit of 50")
    kept(tracing, "trace_state", before)
    tracing.number_input(key="trace_samples").set_value(2)
    tracing.number_input(key="trace_aie_n").set_value(400)
    click(tracing, "Compute / show average effects")
    assert_ok(tracing, "400 facts is over this server's limit of 200")
    kept(tracing, "trace_state", before)


def test_tracing_corrupt_cache_files_are_rebuilt(tracing):
    from editkit.tracing.noise import SIGMA

    path = SIGMA.path(MODEL, subjects=1000)
    assert path.exists()
    path.write_text("{not json")
    tracing.number_input(key="trace_samples").set_value(2)
    tracing.checkbox(key="trace_no_cache").check()  # the traces themselves are cached; the noise scale is read again
    _trace_with(tracing)
    assert_ok(tracing, None)
    assert json.loads(path.read_text())["sigma"] > 0


# --- FFN memories ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def memories():
    at = open_page("ffn_memories")
    click(at, "Inspect")
    assert_ok(at, None)
    assert at.session_state["mem_view"]
    return at


MEM_CASES = [(f"prompt {n}", {"mem_prompt": p}, e) for n, p, e in PROMPTS] + [
    ("position past the end", {"mem_position": 40}, "position 40 is out of range"),
    ("position before the start", {"mem_position": -400}, "position -400 is out of range"),
]


@pytest.mark.parametrize("name,values,expect", MEM_CASES, ids=[c[0] for c in MEM_CASES])
def test_memories_inputs(memories, name, values, expect):
    before = memories.session_state["mem_view"]
    values = {"mem_prompt": "The Eiffel Tower is located in the city of", "mem_position": -1, **values}
    memories.text_input(key="mem_prompt").set_value(values["mem_prompt"])
    memories.number_input(key="mem_position").set_value(values["mem_position"])
    click(memories, "Inspect")
    assert_ok(memories, expect)
    if expect:
        kept(memories, "mem_view", before)
    else:
        assert memories.session_state["mem_view"].prompt == values["mem_prompt"]
    memories.text_input(key="mem_prompt").set_value("The Eiffel Tower is located in the city of")
    memories.number_input(key="mem_position").set_value(-1).run()


def test_memories_layer_out_of_range_is_refused(memories):
    memories.text_input(key="mem_prompt").set_value("The Eiffel Tower is located in the city of")
    memories.number_input(key="mem_position").set_value(-1)
    memories.number_input(key="mem_layer").set_value(99)
    click(memories, "Inspect")
    assert_ok(memories, None)
    assert memories.number_input(key="mem_layer").value <= 3


MEMORY_LABELS = [("garbage label", "garbage", "should look like L3.M17"), ("layer out of range", "L99.M3", "layer 99"),
                 ("memory out of range", "L1.M999999", "memory 999999 is out of range"),
                 ("NUL label", "L1\x00.M2", "should look like")]


@pytest.mark.parametrize("name,label,expect", MEMORY_LABELS, ids=[m[0] for m in MEMORY_LABELS])
def test_memory_labels(memories, name, label, expect):
    memories.text_input(key="mem_prompt").set_value("The Eiffel Tower is located in the city of")
    memories.number_input(key="mem_position").set_value(-1)
    memories.text_input(key="mem_trig_manual").set_value(label).run()
    assert_ok(memories, expect)
    memories.text_input(key="mem_trig_manual").set_value("")
    memories.text_input(key="mem_int_extra").set_value(label)
    click(memories, "Intervene")
    assert_ok(memories, expect)
    memories.text_input(key="mem_int_extra").set_value("").run()


def test_memories_limits_and_corrupt_index(memories):
    from editkit.memories import triggers

    memories.number_input(key="mem_geva_positions").set_value(3000)
    click(memories, "Compute analyses")
    assert_ok(memories, "3,000 corpus positions is over this server's limit of 1,000")
    memories.number_input(key="mem_geva_positions").set_value(8)
    memories.number_input(key="mem_trig_tokens").set_value(400)
    memories.text_input(key="mem_trig_manual").set_value("L1.M3").run()
    click(memories, "Build the trigger index")
    assert_ok(memories, None)
    path = triggers.index_path(MODEL, 400, triggers.DEFAULT_SEQ_LEN, triggers.DEFAULT_TOP)
    assert path.exists()
    path.write_bytes(b"corrupt")
    memories.run()  # a corrupt index reads as missing: the page offers to build it again
    assert_ok(memories, None)
    assert any("No trigger index" in i.value for i in memories.info)
    click(memories, "Build the trigger index")
    assert_ok(memories, None)
    assert any(re.match(r"1\. `", m.value) for m in memories.markdown)  # trigger examples are listed again


# --- edit & compare ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def editing():
    at = open_page("edit_compare")
    at.multiselect(key="ec_methods").set_value(["rome"])
    at.number_input(key="ec_ngen").set_value(0)
    click(at, "Edit and compare")
    assert_ok(at, None)
    assert at.session_state["ec_out"]
    return at


EDIT_DEFAULTS = {"ec_prompt": "The mother tongue of {} is", "ec_subject": "Danielle Darrieux", "ec_new": "English",
                 "ec_true": "French"}
EDIT_CASES = [
    ("prompt empty", {"ec_prompt": ""}, "must contain '{}'"),
    ("prompt whitespace", {"ec_prompt": " \t\n "}, "must contain '{}'"),
    ("prompt 10k chars", {"ec_prompt": LONG + " {} is"}, TOO_LONG),
    ("prompt unicode-rtl-emoji", {"ec_prompt": UNICODE + " {} speaks"}, None),
    ("prompt nul", {"ec_prompt": "The mother\x00 tongue of {} is"}, "NUL character"),
    ("prompt without {} (subject absent)", {"ec_prompt": "The mother tongue is"}, "must contain '{}'"),
    ("subject repeated", {"ec_prompt": "{} and {} speak"}, "exactly one '{}'"),
    ("subject empty", {"ec_subject": "  "}, "the subject is empty"),
    ("subject NUL", {"ec_subject": "Dani\x00elle"}, "NUL character"),
    ("target empty", {"ec_new": ""}, "the new target is empty"),
    ("target whitespace", {"ec_new": "   "}, "the new target is empty"),
    ("target equals the true one", {"ec_new": "French"}, "the new target is the same as the true target"),
    ("target multi-token", {"ec_new": "Old Church Slavonic"}, None),
    ("true target empty (optional)", {"ec_true": ""}, None),
]


def _edit_with(at, **values):
    """Type the request; a request that cannot be edited is said as soon as it is typed (and the button is
    disabled), otherwise press the button."""
    for key, value in {**EDIT_DEFAULTS, **values}.items():
        at.text_input(key=key).set_value(value)
    at.run()
    button = next(b for b in at.button if b.label == "Edit and compare")
    return at if button.disabled else button.click().run()


@pytest.mark.parametrize("name,values,expect", EDIT_CASES, ids=[c[0] for c in EDIT_CASES])
def test_edit_inputs(editing, name, values, expect):
    before = editing.session_state["ec_out"]
    _edit_with(editing, **values)
    assert_ok(editing, expect)
    if expect:
        kept(editing, "ec_out", before)
    assert editing.session_state["ec_out"]


HPARAMS = [("malformed JSON", '{"v_lr": 0.5,', "not valid JSON|Expecting"), ("NaN value", '{"v_lr": NaN}', "finite"),
           ("unknown key", '{"learning_rate": 1}', "unknown hyperparameter"),
           ("not an object", "[1, 2]", "must be a JSON object"),
           ("layer out of range", '{"layers": [40]}', "out of range")]


@pytest.mark.parametrize("name,text,expect", HPARAMS, ids=[h[0] for h in HPARAMS])
def test_edit_hyperparameters(editing, name, text, expect):
    before = editing.session_state["ec_out"]
    editing.text_area(key="ec_hp_rome@tiny-gpt2").set_value(text)
    _edit_with(editing)
    assert_ok(editing, expect)
    assert any("Something" not in e and re.search(expect, e) for e in errors(editing))
    kept(editing, "ec_out", before)
    editing.text_area(key="ec_hp_rome@tiny-gpt2").set_value("").run()  # empty: the defaults
    assert_ok(editing, None)


def test_edit_limits_and_corrupt_statistics(editing):
    from editkit.editing import stats

    before = editing.session_state["ec_out"]
    editing.number_input(key="ec_ngen").set_value(1)
    editing.number_input(key="ec_gentokens").set_value(90)
    _edit_with(editing)
    assert_ok(editing, "90 generated tokens is over this server's limit of 60")
    kept(editing, "ec_out", before)
    editing.number_input(key="ec_ngen").set_value(0)
    editing.number_input(key="ec_life_n").set_value(30)
    click(editing, "Run lifelong editing")
    assert_ok(editing, "30 sequential edits is over this server's limit of 20")
    files = list(Path(stats.STORE.path("x", ".safetensors", within=MODEL)).parent.glob("*.safetensors"))
    assert files
    for f in files:
        f.write_bytes(b"corrupt statistics")
    _edit_with(editing)  # the corrupt statistics are recomputed, the edit works: the page is usable
    assert_ok(editing, None)
    assert editing.session_state["ec_out"] is not before
    assert any("Keep the ROME edit" == b.label for b in editing.button)


# --- attention vs FFN ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def similarity_page():
    at = open_page("attention_vs_ffn")
    at.radio(key="sim_facts").set_value("all")
    at.slider(key="sim_n").set_value(10)
    click(at, "Compute similarity curves")
    assert_ok(at, None)
    assert at.session_state["sim_result"]
    return at


def test_similarity_inputs(similarity_page):
    at = similarity_page
    before = at.session_state["sim_result"]
    at.slider(key="sim_n").set_value(300)
    click(at, "Compute similarity curves")
    assert_ok(at, "300 facts is over this server's limit of 200")
    kept(at, "sim_result", before)
    from editkit.similarity import STORE

    for f in Path(STORE.path(MODEL)).parent.glob("*.json"):
        f.write_text("[corrupt")
    at.slider(key="sim_n").set_value(10)
    click(at, "Compute similarity curves")  # the corrupt entry is recomputed
    assert_ok(at, None)
    assert at.session_state["sim_result"].n == 10


def test_lesson_page_loads():
    at = open_page("lesson")
    assert_ok(at, None)
