"""How the pages write what the library gives them: prompts cut where a reader can see it (issue 60.15),
generated text on one line with its special tokens marked (60.13), the time a person waited (60.6)."""
import pytest

from pages import ui


def test_a_long_prompt_is_cut_at_a_word_and_marked():
    prompt = "The Eiffel Tower, which was built for the 1889 World's Fair, " * 40  # 2,400 characters
    head = ui.clip(prompt, 200)
    assert len(head) <= 200 and head.endswith("…") and prompt.startswith(head[:-1])
    assert prompt[len(head) - 1] == " "  # cut before a space, not inside a word
    assert ui.clip("short prompt", 200) == "short prompt"
    assert ui.clip("x" * 300, 50) == "x" * 49 + "…"  # one word longer than the limit is cut inside it


def test_a_continuation_stays_on_one_line_with_its_special_tokens_marked():
    text = "Rome, Italy<start_of_image><start_of_image><start_of_image>\n\nThe *capital* of #1"
    shown = ui.continuation(text)
    assert "\n" not in shown and " ⏎  ⏎ " in shown  # MEMIT's newline began a stray paragraph
    assert "`<start_of_image> ×3`" in shown  # a token, not raw markup
    assert r"\*capital\*" in shown and r"\#1" in shown  # the rest literally


@pytest.mark.parametrize("wall,computed,said", [
    (274.6, 21.3, "you waited 4.6 min from the click; the computation itself took 21.3 s, the rest was"),
    (22.0, 21.3, "you waited 22.0 s from the click"),
])
def test_the_time_said_is_the_time_waited(monkeypatch, wall, computed, said):
    """Attention vs FFN said "computed in 21.3 s" after 274.6 s from the click."""
    import streamlit as st

    monkeypatch.setattr(st, "session_state", {ui.K.WAITED: {"similarity curves": wall}})
    text = ui.waited("similarity curves", computed)
    assert text.startswith(said) and (("the rest was" in text) == (wall - computed > 2))
    monkeypatch.setattr(st, "session_state", {})
    assert ui.waited("similarity curves", computed) == "computed in 21.3 s"  # no wait recorded this session
