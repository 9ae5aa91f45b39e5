"""Two sessions of the app (two AppTests share the process's cached model, as two browser tabs share a server): one
keeps a ROME edit, every page of that session computes with it, the other session still sees the base model, and
undo works."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")
PROMPT = "The mother tongue of Danielle Darrieux is"


def _session(page=None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=600)
    at.session_state["model_choice"] = "tiny-gpt2"
    if page:
        at.switch_page(page)
    at.run()
    assert not at.exception
    return at


def _click(at, label):
    next(b for b in at.button if b.label == label).click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]


@pytest.fixture(scope="module")
def sessions():
    editor = _session("pages/edit_compare.py")
    editor.multiselect(key="ec_methods").set_value(["rome"])
    editor.number_input(key="ec_ngen").set_value(0)
    _click(editor, "Edit and compare")
    _click(editor, "Keep the ROME edit")
    other = _session()
    return editor, other


def _prediction(at) -> list:
    """The logit lens after the last FFN at the prompt's last token, read on the FFN memories page."""
    at.switch_page("pages/ffn_memories.py").run()
    at.text_input(key="mem_prompt").set_value(PROMPT)
    _click(at, "Inspect")
    return at.session_state["mem_view"].lens[-1].after


def test_a_kept_edit_applies_to_its_own_session_only(sessions):
    editor, other = sessions
    edits = editor.session_state["_editkit_edits"]["tiny-gpt2"]
    assert len(edits) == 1 and edits[0]["label"].startswith("ROME: ")
    mine, theirs = _prediction(editor), _prediction(other)
    assert mine != theirs  # the edit changes this prompt's prediction, for the editor only
    assert other.session_state["_editkit_edits"]["tiny-gpt2"] == []
    fresh = _prediction(_session())
    assert fresh == theirs  # a new session sees the base model too


def test_keeping_the_same_edit_twice_is_refused_and_undo_works(sessions):
    editor, _ = sessions
    editor.switch_page("pages/edit_compare.py").run()
    next(b for b in editor.button if b.label == "Keep the ROME edit").click().run()
    assert any("already kept" in i.value for i in editor.info)
    assert len(editor.session_state["_editkit_edits"]["tiny-gpt2"]) == 1


def test_undo_returns_the_session_to_the_base_model(sessions):
    editor, other = sessions
    assert any("patch" in b.proto.label for b in editor.get("download_button"))  # the kept edit as a patch
    _click(editor, "Undo last")
    assert editor.session_state["_editkit_edits"]["tiny-gpt2"] == []
    assert _prediction(editor) == _prediction(other)
