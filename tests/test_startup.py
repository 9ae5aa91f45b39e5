"""Start-up: every command's --help answers without importing torch or transformers (each command file
registers a cheap parser and imports its heavy modules when it runs), and the vocabulary a parser names for
that (choices, defaults) is the library's."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import editkit

ROOT = Path(editkit.__file__).resolve().parent.parent
HEAVY = ("torch", "transformers")

# One process answers every --help (top level, each command, each nested action), then lists what it imported.
HELP_EVERYTHING = r"""
import contextlib, io, json, re, sys
from editkit.cli import COMMANDS, main

def helped(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(argv + ["--help"])
        except SystemExit as exc:
            assert exc.code == 0, (argv, exc.code)
    return out.getvalue()

asked = [[]]
for name in COMMANDS:
    text = helped([name])
    nested = re.search(r"^usage: .*? " + re.escape(name) + r"\s+(?:\[-h\]\s+)?\{([a-z,-]+)\}", text,
                       re.S | re.M)
    asked += [[name]] + [[name, inner] for inner in (nested.group(1).split(",") if nested else [])]
for argv in asked[1:]:
    helped(argv)
helped([])
print(json.dumps({"asked": asked, "modules": sorted(sys.modules)}))
"""


def _run(code: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_help_answers_without_torch_or_transformers():
    out = _run(HELP_EVERYTHING)
    asked = {" ".join(argv) for argv in out["asked"]}
    assert {"predict", "bench trace", "bench report", "lesson build", "evaluate"} <= asked  # nested ones too
    heavy = [m for m in out["modules"] if m.split(".")[0] in HEAVY]
    assert not heavy, f"--help imported {heavy[:10]}"


def test_parsing_a_command_imports_nothing_heavy():
    """The parser of a real command line is as light: torch arrives when the command runs, not before."""
    out = _run("import json, sys\nfrom editkit.cli import build_parser\n"
               "args = build_parser().parse_args(['predict', 'The Colosseum is in', '--top', '3'])\n"
               "assert args.top == 3 and callable(args.func)\n"
               "print(json.dumps({'modules': sorted(sys.modules)}))")
    assert not [m for m in out["modules"] if m.split(".")[0] in HEAVY]


def test_the_parsers_vocabulary_is_the_libraries():
    """What a parser names without importing the library (to stay light) equals the library's own
    constants."""
    from importlib import import_module

    from editkit.commands import common, intervene, triggers
    from editkit.commands import similarity as similarity_command
    from editkit.editing.methods import all_methods, builtin_names
    from editkit.model import loading

    similarity = import_module("editkit.similarity")  # the modules (their packages export functions so named)
    intervene_lib = import_module("editkit.memories.intervene")
    triggers_lib = import_module("editkit.memories.triggers")

    assert intervene.MODES == intervene_lib.MODES
    assert triggers.SEQ_LEN == triggers_lib.DEFAULT_SEQ_LEN
    assert (similarity_command.FACT_SETS, similarity_command.MODES, similarity_command.DEFAULT_N,
            similarity_command.TOP_K) == (similarity.FACT_SETS, similarity.MODES, similarity.DEFAULT_N,
                                          similarity.TOP_K)
    assert common.DTYPES == tuple(loading.DTYPES)
    # every method file registers the method of its own name (how --help lists them without importing them)
    registered = {m.name for m in all_methods() if m.apply.__module__.startswith("editkit.editing.methods.")}
    assert set(builtin_names()) == registered


def test_an_unknown_method_is_one_line_before_the_model_loads(capsys, tmp_path):
    from editkit.cli import main

    (tmp_path / "r.json").write_text("[]")
    assert main(["edit", "--method", "nonesuch", "--requests", str(tmp_path / "r.json"), "--model",
                 "no-such-model-xyz"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: method must be one of") and "rome" in err and "no-such-model" not in err


def test_bench_startup_measures_help_and_refuses_bad_input(capsys):
    from editkit.cli import main
    from editkit.evaluation.startup import StartupBench, StartupSpec, bench_startup

    out = bench_startup(StartupSpec(runs=2, measurements=("help",)), say=lambda line: None)
    row = out.codes["current"]["help"]
    assert row["command"] == "python -m editkit --help" and len(row["seconds"]) == 2
    assert row["best"] == min(row["seconds"]) and "phases" not in row  # --help has no probe
    assert set(out.goals()) == {"help"} and out.goals()["help"]["goal"] == 0.5
    assert StartupBench.from_json(out.to_json()).to_json() == out.to_json()
    assert list(out.to_frame()["phase"]) == ["total"]
    assert main(["bench", "startup", "--only", "help,nonsense"]) == 2
    assert "unknown measurement(s) nonsense" in capsys.readouterr().err
    argv = ["bench", "startup", "--only", "help", "--runs", "1", "--reference", "no-such-commit-xyz"]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("error: --reference no-such-commit-xyz:")


@pytest.mark.full
def test_bench_startup_phases_against_a_reference(tmp_path):
    """predict, load and a first use by phase on a tiny model (not converted: loaded through transformers),
    beside the same code exported from HEAD: the phases of the current code name the load's steps; the
    reference (a git archive) runs from its own folder."""
    from editkit.evaluation.startup import StartupSpec, bench_startup

    out = bench_startup(StartupSpec(model="tiny-gpt2", runs=1, measurements=("predict", "load", "first-use"),
                                    reference="HEAD"), say=lambda line: None)
    current, reference = out.codes["current"], out.codes["HEAD"]
    assert reference["root"] != current["root"] and not Path(reference["root"]).exists()  # removed afterwards
    for code in (current, reference):
        phases = code["predict"]["phases"]
        assert {"python", "import editkit", "parser", "config", "tokenizer", "weights", "check",
                "answer"} <= set(phases)
        for m in ("load", "first-use"):
            assert {"config", "tokenizer", "weights", "check", "rest"} <= set(code[m]["phases"])
        assert set(code["predict"]["cpu_phases"]) == set(phases)  # CPU seconds of the same phases
        assert code["predict"]["best"] > 0 and code["load"]["best"] > 0
