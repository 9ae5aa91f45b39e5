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


def _intervene(at):
    next(b for b in at.button if b.label == "Intervene").click().run()


def test_a_new_inspection_picks_its_own_top_memory_and_an_empty_pick_is_refused():
    """The second walk: after a second Inspect the memory picker kept the first prompt's memory, which the new
    list lacks, so it showed none; Intervene then ran with no memory and 'memories switched off' showed the
    unchanged model. Its continuation read 'of** Ecuador, ...**' (markdown's bold cannot open on a space)."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/ffn_memories.py").run()
    _inspect(at)
    first = [m.label for m in at.session_state["mem_view"].memories]
    assert at.multiselect(key="mem_int_pick").value == first[:1]
    at.text_input(key="mem_prompt").set_value("The Amazon River flows through the country of")
    at.number_input(key="mem_layer").set_value(0)
    _inspect(at)
    second = [m.label for m in at.session_state["mem_view"].memories]
    assert second[0] != first[0] and at.multiselect(key="mem_int_pick").value == second[:1]
    at.multiselect(key="mem_int_pick").set_value([])
    _intervene(at)
    assert any("pick a memory from the list or type one" in e.value for e in at.error)
    assert "mem_intervention" not in at.session_state
    at.multiselect(key="mem_int_pick").set_value(second[:1])
    _intervene(at)
    assert not at.error and at.session_state["mem_intervention"].memories


def test_strong_keeps_the_spaces_outside_the_bold():
    from pages.ffn_memories import strong

    assert strong(" Ecuador, and") == " **Ecuador, and**" and strong("x ") == "**x** " and strong("  ") == "  "
