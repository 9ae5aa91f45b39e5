"""The FFN memories page says which prompt its memories are of."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def _inspect(at):
    next(b for b in at.button if b.label == "Inspect").click().run()


def test_memories_kept_after_a_refused_inspect_say_whose_they_are():
    """Issue 60.10: after a refused Inspect the earlier prompt's memories stayed under a form holding another
    prompt, with no note."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/ffn_memories.py").run()
    _inspect(at)
    view = at.session_state["mem_view"]
    assert not at.exception and not at.error and view.prompt == "The Eiffel Tower is located in the city of"
    assert not any("last inspection that finished" in c.value for c in at.caption)
    at.text_input(key="mem_prompt").set_value("   ")
    _inspect(at)
    assert at.error and at.session_state["mem_view"] is view  # refused: the earlier memories are kept
    note = [c.value for c in at.caption if "last inspection that finished" in c.value]
    assert note and "The Eiffel Tower is located in the city of" in note[0].replace("\\", "")
