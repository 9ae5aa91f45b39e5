"""Every session-state key of the Lesson page, declared once. A widget's key is its value's session-state key,
so the inputs' keys are here too; a key that depends on the fact, the step or the new target is a function of
them. Nothing else in the Lesson page spells a key (tests/test_lesson_page.py reads them from here or writes
them as the student's browser would)."""
from __future__ import annotations

from typing import Final

# the student's place and answers
ANSWERS: Final = "lesson_answers"  # "<fact>:<step>[:<target>]" -> {"grade", "row", "answer"}
FACT: Final = "lesson_fact"  # the fact picked in the sidebar
STEP: Final = "lesson_step"  # the step radio
PREV: Final = "lesson_prev"
NEXT: Final = "lesson_next"
DOWNLOAD_CSV: Final = "lesson_dl_csv"
DOWNLOAD_JSON: Final = "lesson_dl_json"

# the teacher
TEACHER_PASS: Final = "lesson_teacher_pass"
CLEAR_CONFIRM: Final = "lesson_clear_confirm"
CLEAR: Final = "lesson_clear"
RESET_PACK: Final = "lesson_reset_pack"
ADD_FORM: Final = "lesson_add_form"
ADD_PROMPT: Final = "lesson_add_prompt"
ADD_SUBJECT: Final = "lesson_add_subject"
ADD_TRUE: Final = "lesson_add_true"
ADD_TARGETS: Final = "lesson_add_targets"
ADD_PARAPHRASES: Final = "lesson_add_para"
ADD_NEIGHBOURS: Final = "lesson_add_neigh"
ADDED: Final = "lesson_added"  # the success message after a fact was added (shown once)
ADDING: Final = "lesson_adding"  # (the new fact's key, the pack's facts before the job), for a cancel
ADD_CANCELLED: Final = "lesson_add_cancelled"

# step 4's and step 10's own inputs (one of each per page)
OWN_MEMORY_PROMPT: Final = "lesson_own_mprompt"
OWN_MEMORY_TOKEN: Final = "lesson_own_mtoken"
OWN_MEMORY_LAYER: Final = "lesson_own_mlayer"
OWN_LIFELONG_METHODS: Final = "lesson_own_life_methods"
OWN_LIFELONG_EDITS: Final = "lesson_own_life_n"
OWN_LIFELONG_BATCH: Final = "lesson_own_life_batch"
OWN_SWEEP_LAYERS: Final = "lesson_own_layers_9"


def answer(fid: str, n: int, target: int | None = None) -> str:
    """Where a step's answer is kept in ANSWERS: per fact, and per new target for the steps about an edit."""
    return f"{fid}:{n}" if target is None else f"{fid}:{n}:{target}"


def question(n: int, fid: str, target: int | None = None) -> str:
    """The input of step n's question (a slider, radio or multiselect)."""
    return f"lesson_q{n}_{fid}" if target is None else f"lesson_q{n}_{fid}_{target}"


def cell(n: int, fid: str) -> tuple[str, str, str]:
    """A grid step's inputs: (token, layer, the clickable grid)."""
    return f"lesson_q{n}_token_{fid}", f"lesson_q{n}_layer_{fid}", f"lesson_q{n}_grid_{fid}"


def form(n: int, fid: str) -> str:
    return f"lesson_form_{n}_{fid}"


def again(n: int, fid: str) -> str:
    return f"lesson_again_{n}_{fid}"


def target(fid: str) -> tuple[str, str]:
    """The new-target picker of a fact, and where its pick is kept while no step draws it."""
    return f"lesson_target_{fid}", f"lesson_target_kept_{fid}"


def own_result(n: int) -> str:
    """Step n's "try your own" result."""
    return f"lesson_own_{n}"


def own_go(n: int) -> str:
    return f"lesson_own_go_{n}"


def own(n: int, field: str) -> str:
    """An input of step n's "try your own": prompt, subject, true, new, neigh (a request), tprompt, tsubject,
    samples, model (a trace)."""
    return f"lesson_own_{field}_{n}"


def chart(name: str) -> str:
    """A chart's element key ("fig_hidden", "own_fig_2", "lens_pack", ...)."""
    return f"lesson_{name}"


def class_answers(i: int) -> str:
    """The teacher's table of the class's answers to the i-th fact."""
    return f"lesson_class_answers_{i}"
