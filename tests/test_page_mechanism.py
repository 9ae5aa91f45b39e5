"""How the app's pages are run, with only public Streamlit (issue 59.3). app.py's st.navigation lists each
page by its module's main(), at the URL of its file's name; the design card keeps the folder name pages/,
which Streamlit 1.67 still reads as a legacy multipage folder until a session calls st.navigation: a fresh
server runs a page opened by its URL alone, as a script. Such a run hands over to app.py (ui.script_run).
These tests pin that behaviour of Streamlit (they fail when it changes, and ui.script_run can then go) and the
pages' shape that the mechanism needs: no Streamlit command while a page module is imported (st.rerun or
st.stop raised inside an import drops the half-imported module while other sessions wait for it: "cannot
import name 'ui' from 'pages'"), every page a main(), every session-state key named once."""
import ast
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app.py"
# The pages app.py's navigation runs by their main(); file pages (the Lesson until it has a main()) run as
# scripts.
MODULE_PAGES = re.findall(r"st\.Page\((\w+)\.main,", APP.read_text(encoding="utf-8"))
FILE_PAGES = re.findall(r'st\.Page\("pages/(\w+)\.py"', APP.read_text(encoding="utf-8"))
# Streamlit's legacy mode serves pages/*.py (not its subfolders) at URLs of their own; every module is imported
PAGE_FILES = sorted(p for p in (ROOT / "pages").glob("*.py") if p.stem != "__init__")
MODULES = sorted(p for p in (ROOT / "pages").rglob("*.py") if p.stem != "__init__")


def top_level(path: Path) -> list[ast.stmt]:
    """A module's statements that run when it is imported (the `if __name__ == "__main__"` block left out)."""
    out = []
    for stmt in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test) == "__name__ == '__main__'":
            continue
        out.append(stmt)
    return out


def calls(stmts) -> list[str]:
    return [ast.unparse(n.func) for s in stmts if not isinstance(s, (ast.FunctionDef, ast.ClassDef))
            for n in ast.walk(s) if isinstance(n, ast.Call)]


def test_streamlit_still_runs_a_pages_file_alone_before_any_navigation(tmp_path):
    """The pinned behaviour: with a pages/ folder beside the entrypoint, a page URL's first run executes that
    file alone, as a script (AppTest starts every run so, as a fresh server does). When this fails, Streamlit
    no longer has the legacy mode: ui.script_run's hand-over to app.py and the __main__ blocks can be
    removed."""
    (tmp_path / "pages").mkdir()
    (tmp_path / "app.py").write_text(
        "import streamlit as st\n"
        "st.navigation([st.Page(lambda: st.title('home'), url_path='home', default=True),\n"
        "               st.Page(lambda: st.title('other, from the app'), url_path='other')]).run()\n")
    (tmp_path / "pages" / "other.py").write_text(
        "import streamlit as st\nst.title(f'other, run alone as {__name__}')\n")
    at = AppTest.from_file(str(tmp_path / "app.py")).switch_page("pages/other.py").run()
    assert not at.exception
    assert [t.value for t in at.title] == ["other, run alone as __main__"]


@pytest.mark.parametrize("module", FILE_PAGES)
def test_a_page_opened_first_runs_through_the_app(module):
    """A page opened by its URL on a fresh server (AppTest's every run) shows, drawn by app.py's
    navigation."""
    at = AppTest.from_file(str(APP), default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page(f"pages/{module}.py").run()
    assert not at.exception, at.exception
    assert at.title and at.title[0].value, module  # the page's own title: drawn by its main()


def test_every_page_is_a_main_its_file_hands_to_the_app():
    """Each page file defines main() and ends with `if __name__ == "__main__": ui.script_run(__file__, main)`;
    the other files of pages/ (ui, the section helpers, served at a URL of their own by the legacy mode too)
    end with `ui.script_run(__file__)`, which opens the home page."""
    assert len(FILE_PAGES) >= 5
    for path in PAGE_FILES:
        tree = ast.parse(path.read_text(encoding="utf-8")).body
        last = tree[-1]
        assert isinstance(last, ast.If) and ast.unparse(last.test) == "__name__ == '__main__'", path.name
        call = ast.unparse(last.body[0])
        if path.stem in FILE_PAGES:
            assert call == "ui.script_run(__file__, main)", (path.name, call)
            assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree), path.name
        else:
            assert call.endswith("script_run(__file__)"), (path.name, call)


def test_no_module_of_pages_runs_streamlit_when_imported():
    for path in MODULES:
        made = calls(top_level(path))
        assert not [c for c in made if c.startswith(("st.", "ui."))], (path.name, made)


def _string_keys(path: Path) -> list[str]:
    """Session-state keys written as string literals: st.session_state[...] / .get / .pop / .setdefault and
    key=... of a widget or element."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("session_state") and \
                isinstance(node.slice, (ast.Constant, ast.JoinedStr)):
            found.append(ast.unparse(node))
        if isinstance(node, ast.Call):
            f = ast.unparse(node.func)
            if re.search(r"session_state\.(get|pop|setdefault)$", f) and node.args and \
                    isinstance(node.args[0], (ast.Constant, ast.JoinedStr)):
                found.append(ast.unparse(node))
            found += [ast.unparse(k) for k in node.keywords
                      if k.arg == "key" and isinstance(k.value, (ast.Constant, ast.JoinedStr))]
    return found


@pytest.mark.parametrize("path", MODULES, ids=[p.relative_to(ROOT / "pages").as_posix() for p in MODULES])
def test_session_state_keys_are_named_once(path):
    """Every key a page reads or writes is a name of its K class (a page's keys in one place, no typo can make
    a second key)."""
    assert _string_keys(path) == []


def test_the_key_check_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('import streamlit as st\nst.session_state["x"] = 1\nst.button("b", key=f"go_{1}")\n'
                   'st.session_state.get("y")\n')
    assert len(_string_keys(bad)) == 3
