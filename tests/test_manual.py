"""The manual stays true to the code: the README stays a front door with its set-up and test commands, every file
path the manual names exists (a package split or a rename that leaves the manual behind fails here), and every
`editkit ...` command in its code blocks parses with the real CLI (a renamed option fails here). The strict MkDocs
build (.ci/run) checks the links and anchors between pages."""
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md", ROOT / "assets" / "hparams" / "README.md"]
PATH = re.compile(r"`((?:editkit|tests|assets|benchmarks|pages|docs|\.ci|\.streamlit)/[^`\s]*)`")
COMMAND = re.compile(r"^(?:[A-Z_]+=\S+\s+|time\s+|nice\s+(?:-n\s+\d+\s+)?)*(?:editkit|python -m editkit)\s+(.*)$")


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    quick = "python -m pytest -q tests -n auto\n"
    for command in ("pip install -r requirements.txt", "streamlit run app.py", quick,
                    "python -m pytest -q tests --full"):
        assert command in text, command
    assert quick in (ROOT / ".ci" / "run").read_text(encoding="utf-8"), "CI runs the README's quick tier"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_paths_the_manual_names_exist(page):
    missing = [m for m in PATH.findall(page.read_text(encoding="utf-8"))
               if not any(c in m for c in "<*") and not (ROOT / m.rstrip("/")).exists()]
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


def documented_commands(text: str):
    """The arguments of every `editkit ...` line in the page's bash blocks (continuations joined, comments cut);
    lines with placeholders (`[...]`, `...`, a one-letter name such as M or T) are left out."""
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            m = COMMAND.match(line.strip())
            if not m:
                continue
            args = re.sub(r"\s+#.*$", "", m.group(1))
            if "[" in args or "..." in args or re.search(r"(^|[\s=])[A-Z]('|\s|$)", args):
                continue
            yield args


def test_documented_commands_parse():
    from editkit.cli import build_parser

    parser = build_parser()
    bad = []
    for page in PAGES:
        for args in documented_commands(page.read_text(encoding="utf-8")):
            try:
                parser.parse_args(shlex.split(args))
            except SystemExit:
                bad.append(f"{page.relative_to(ROOT)}: editkit {args}")
    assert not bad, "commands in the manual the CLI refuses:\n" + "\n".join(bad)
