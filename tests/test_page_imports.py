"""No import of a page's module may stop half way. Streamlit's st.rerun raises; raised while pages/ui.py was being
imported (to leave the legacy multipage mode on a fresh server), it dropped the half-imported module while other
sessions' threads waited for that same import, and CPython 3.11 then hands those threads nothing: four of five
students opening the Lesson at once got "cannot import name 'learn' from 'pages'". So the legacy mode is left by a
call each page makes after its imports, and modules imported by pages run no Streamlit command at import."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The pages are what app.py's navigation lists; every other module in pages/ is a helper the pages import.
PAGES = ["app.py", *re.findall(r'st\.Page\("(pages/\w+\.py)"', (ROOT / "app.py").read_text(encoding="utf-8"))]
HELPERS = [p for p in sorted((ROOT / "pages").rglob("*.py"))
           if p.relative_to(ROOT).as_posix() not in PAGES and p.stem != "__init__"]


def top_level_calls(path: Path) -> list[str]:
    """The dotted names of the calls made by a file's top-level statements (not inside a def or class)."""
    out = []
    for stmt in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                out.append(ast.unparse(node.func))
    return out


def test_helpers_run_no_streamlit_command_at_import():
    assert len(PAGES) > 3 and any(p.stem == "ui" for p in HELPERS)
    for helper in HELPERS:
        calls = top_level_calls(helper)
        assert not [c for c in calls if c.startswith("st.") or "legacy" in c], (helper.name, calls)


def test_every_page_leaves_the_legacy_mode_itself():
    for page in PAGES:
        calls = top_level_calls(ROOT / page)
        assert "ui.leave_legacy_multipage_mode" in calls, page

