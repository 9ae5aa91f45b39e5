"""Every Python block of the manual (docs/) and the README runs as written. A block that cannot run here is marked
on the line above it with `<!-- not run: why -->`, the reason said. The quick tier checks that every block parses,
that every mark gives its reason, and that the runner fails on a failing page (small pages of its own, no model);
the full tier runs each page's blocks top to bottom in one fresh Python process (a reader following the page), on
the embedded model."""
import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
MARK = re.compile(r"<!--\s*not run:\s*(?P<why>.*?)\s*-->")


def blocks(page: Path) -> list[dict]:
    """The page's Python blocks in order: {"code", "line" (the fence's, 1-based), "not_run": the mark's reason or
    None}. A fence may be indented (a block inside a list item): its code is dedented by the fence's indent. The
    mark is the last non-blank line before the fence."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() != "```python":
            i += 1
            continue
        fence, before = i, next((x for x in reversed(lines[:i]) if x.strip()), "")
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        mark = MARK.search(before)
        out.append({"code": textwrap.dedent("\n".join(lines[fence + 1:i]) + "\n"), "line": fence + 1,
                    "not_run": mark.group("why") if mark else None})
        i += 1
    return out


def run_page(page: Path, folder: Path, timeout: float = 3600) -> subprocess.CompletedProcess:
    """The page's runnable blocks, joined in order, in a fresh interpreter whose working folder is `folder` (what
    they write stays there), seeing this checkout, offline, with the shared cache and no progress bars."""
    script = folder / "page.py"
    script.write_text("\n".join(b["code"] for b in blocks(page) if b["not_run"] is None), encoding="utf-8")
    env = dict(os.environ, HF_HUB_OFFLINE="1", EDITKIT_PROGRESS="0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, str(script)], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=timeout)


WITH_BLOCKS = [p for p in PAGES if blocks(p)]


def test_the_manual_has_python_blocks_and_each_parses_and_every_mark_says_why():
    assert len(WITH_BLOCKS) >= 5
    for page in WITH_BLOCKS:
        for b in blocks(page):
            where = f"{page.relative_to(ROOT)}:{b['line']}"
            try:
                ast.parse(b["code"])
            except SyntaxError as exc:
                pytest.fail(f"{where}: the block does not parse ({exc})")
            assert b["not_run"] is None or len(b["not_run"]) >= 10, f"{where}: a not-run mark needs its reason"


def test_a_mark_is_found_an_indented_block_dedented_and_a_block_read_whole(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n<!-- not run: it needs a GPU with 80 GB -->\n```python\nx = 1\ny = 2\n```\n\n"
                    "```python\nprint(x)\n```\n\n- a list item:\n\n  ```python\n  if x:\n      y = 3\n  ```\n",
                    encoding="utf-8")
    got = blocks(page)
    assert [b["code"] for b in got] == ["x = 1\ny = 2\n", "print(x)\n", "if x:\n    y = 3\n"]
    assert [b["not_run"] for b in got] == ["it needs a GPU with 80 GB", None, None]
    assert [b["line"] for b in got] == [4, 9, 15]


def test_the_runner_fails_on_a_failing_block_shares_state_between_blocks_and_skips_a_marked_one(tmp_path):
    """What the full tier relies on: a page whose later block raises fails (with the error in stderr), a page
    whose blocks build on each other passes, and a marked block (which would fail) is left out."""
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 2\n```\n\n```python\nassert x == 3, 'x is ' + str(x)\n```\n", encoding="utf-8")
    done = run_page(page, tmp_path, timeout=120)
    assert done.returncode != 0 and "x is 2" in done.stderr
    page.write_text("```python\nx = 2\n```\n\n<!-- not run: it would fail here on purpose -->\n```python\n"
                    "raise SystemExit(3)\n```\n\n```python\nimport os\nassert x == 2 and os.environ['EDITKIT_PROGRESS']"
                    " == '0'\n```\n", encoding="utf-8")
    done = run_page(page, tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.full
@pytest.mark.parametrize("page", WITH_BLOCKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_pages_python_runs_verbatim(page, tmp_path):
    if all(b["not_run"] for b in blocks(page)):
        pytest.skip("every block of this page is marked not run")
    done = run_page(page, tmp_path)
    assert done.returncode == 0, f"{page.relative_to(ROOT)}:\n{done.stderr[-3000:]}"
