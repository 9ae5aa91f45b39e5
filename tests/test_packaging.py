"""editkit as a package: pyproject.toml lists every package of editkit/ (an explicit list, because the assets are mapped
in as `editkit.assets`), a wheel built from the checkout carries the shipped assets and the console script, and an
installed copy imports and runs the notebook API from another folder, reading its assets from inside the package."""
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# what the wheel must carry under editkit/assets/: one file of each kind of shipped asset
ASSETS = ["hparams/rome/gemma-3-270m.json", "data/known_1000.json", "data/counterfact/counterfact_500.json",
          "lesson/manifest.json", "results/aie-gemma-3-270m.json", "tiny-tokenizer.json"]


def test_every_package_is_listed():
    found = {".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "editkit").rglob("__init__.py")}
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    assert listed - {"editkit.assets"} == found, (f"missing from pyproject.toml: {sorted(found - listed)}; "
                                                  f"listed but absent: {sorted(listed - found - {'editkit.assets'})}")
    assert PYPROJECT["tool"]["setuptools"]["package-dir"]["editkit.assets"] == "assets"
    assert PYPROJECT["project"]["scripts"]["editkit"] == "editkit.cli:run"
    for asset in ASSETS:
        assert (ROOT / "assets" / asset).is_file(), asset


def _clean_env() -> dict:
    """The environment of a user without this checkout on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HUB_OFFLINE"] = "1"
    return env


@pytest.mark.full
def test_the_wheel_carries_the_assets_and_the_console_script(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, env=_clean_env(), cwd=tmp_path)
    wheel = next(tmp_path.glob("editkit-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for asset in ASSETS:
        assert f"editkit/assets/{asset}" in names, asset
    assert "editkit/api.py" in names and "editkit/editing/methods/rome.py" in names
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "editkit = editkit.cli:run" in zipfile.ZipFile(wheel).read(entry).decode()
    assert not any(n.startswith(("tests/", "pages/", "benchmarks/")) for n in names)


SCRIPT = """
import editkit, editkit.core.paths as paths
assert editkit.__file__.startswith({venv!r}), editkit.__file__
assert paths.ASSETS == paths.PACKAGE / "assets", paths.ASSETS   # the assets inside the installed package
lm = editkit.load("tiny-gpt2")
tr = editkit.trace(lm, "The Eiffel Tower is located in", "Eiffel Tower", samples=2, window=2)
tr.figure(); tr.to_frame()
ed = editkit.edit(lm, "rome", {{"prompt": "{{}} is located in", "subject": "The Eiffel Tower", "target_new": "Rome"}})
ed.figure(); ed.to_frame()
assert editkit.shipped_aie()["gemma-3-270m"].n_facts >= 100
print("ok", ed.method, len(tr.to_frame()))
"""


@pytest.mark.full
def test_an_installed_copy_works_from_another_folder(tmp_path):
    """A venv that sees the installed dependencies (--system-site-packages) gets editkit itself from a wheel of the
    checkout (no editable link); from a folder outside the checkout the API runs on a tiny model and the
    console script answers --help."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    # the wheel is built by this interpreter's setuptools: a venv's own bundled setuptools (65 on Python 3.11)
    # shadows the installed one and has no bdist_wheel without the wheel package
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(ROOT)], check=True, env=_clean_env(), cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("editkit-*.whl"))
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                   check=True, env=_clean_env(), cwd=tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**_clean_env(), "EDITKIT_CACHE": str(tmp_path / "cache")}
    out = subprocess.run([str(python), "-c", SCRIPT.format(venv=str(venv))], env=env, cwd=work,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok rome")
    cli = subprocess.run([str(venv / "bin" / "editkit"), "--help"], env=env, cwd=work, capture_output=True,
                         text=True, timeout=300)
    assert cli.returncode == 0 and "usage: editkit" in cli.stdout and "trace" in cli.stdout
