"""The home page runs headless (Streamlit's AppTest) on any prompt without an exception."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")
PROMPTS = ["The Eiffel Tower is located in the city of", "", "   ", "日本の首都は", "x" * 5000, "\n\t", "<bos>",
           "🙂" * 3]


@pytest.fixture(scope="module")
def home():
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.run()
    return at


def test_home_renders_model_card_and_logit_lens(home):
    assert not home.exception
    assert [m.label for m in home.metric][:3] == ["family", "layers", "d_model"]
    assert len(home.get("plotly_chart")) == 1


@pytest.mark.parametrize("prompt", PROMPTS, ids=range(len(PROMPTS)))
def test_home_survives_any_prompt(home, prompt):
    home.text_input(key="home_prompt").set_value(prompt).run()
    assert not home.exception
    if not prompt.strip() or len(prompt) > 1000:
        assert home.error, "bad input must show an error box"


def test_home_unknown_model_shows_error():
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["model_choice"] = "other: hub id, folder or GGUF file"
    at.session_state["model_other"] = "./no/such/folder"
    at.run()
    assert not at.exception
    assert any("no model folder" in e.value for e in at.error)


def test_home_on_embedded_model(gemma):
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    assert not at.exception
    table = at.dataframe[0].value
    assert table.iloc[0]["token"] == repr(" Paris")


def test_a_long_prompts_heading_is_cut_at_a_word_and_marked(home):
    """Issue 60.15: a 2,000-character prompt's heading was cut at 200 characters mid-word, unmarked."""
    prompt = "The tower that Gustave Eiffel's company built in Paris " * 9  # 495 characters
    home.text_input(key="home_prompt").set_value(prompt).run()
    heading = next(m.value for m in home.markdown if m.value.startswith("Prediction for"))
    quoted = heading.split("“", 1)[1].split("”", 1)[0].replace("\\", "")
    assert quoted.endswith("…") and len(quoted) <= 200 and prompt[len(quoted) - 1] == " "
