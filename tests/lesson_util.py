"""A tiny lesson pack for the lesson tests: built once per test session by the real builder on tiny-gpt2, for a
fact that model "knows" by ROME's criterion (its top prediction after the prompt is the true target's first token:
' B' for a random 4-layer model)."""
from __future__ import annotations

import json
from pathlib import Path

MODEL = "tiny-gpt2"
FACT = {"prompt": "{} is located in the city of", "subject": "The Eiffel Tower", "target_true": "B",
        "target_new": "Rome", "lesson_targets": ["London"],
        "paraphrase_prompts": ["The Eiffel Tower, a landmark in the city of"],
        "neighborhood_prompts": ["The Louvre is located in the city of", "Notre-Dame is located in the city of"]}
SAMPLES = 2

_BUILT: dict = {}


def write_facts(folder: Path, records=None, name: str = "facts.json") -> Path:
    path = Path(folder) / name
    path.write_text(json.dumps(records if records is not None else [FACT]), encoding="utf-8")
    return path


def tiny_pack(tmp_path_factory) -> Path:
    """The tiny pack's folder (built on first use; later calls in the session reuse it)."""
    if "pack" not in _BUILT:
        from editkit.lesson.build import build
        from editkit.lesson.compute import Settings

        folder = tmp_path_factory.mktemp("lesson")
        build(write_facts(folder), folder / "pack", MODEL, settings=Settings(samples=SAMPLES))
        _BUILT["pack"] = folder / "pack"
    return _BUILT["pack"]
