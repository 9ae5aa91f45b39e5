"""No import of a page's module may stop half way. Streamlit's st.rerun raises; raised while pages/ui.py was being
imported (to leave the legacy multipage mode on a fresh server), it dropped the half-imported module while other
sessions' threads waited for that same import, and CPython 3.11 then hands those threads nothing: four of five
students opening the Lesson at once got "cannot import name 'learn' from 'pages'". So the legacy mode is left by a
call each page makes after its imports, and modules imported by pages run no Streamlit command at import."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["app.py", *(f"pages/{p.name}" for p in sorted((ROOT / "pages").glob("*.py"))
                     if p.stem not in ("__init__", "ui"))]


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


def test_ui_runs_no_streamlit_command_at_import():
    calls = top_level_calls(ROOT / "pages" / "ui.py")
    assert not [c for c in calls if c.startswith("st.") or "legacy" in c], calls


def test_every_page_leaves_the_legacy_mode_itself():
    for page in PAGES:
        calls = top_level_calls(ROOT / page)
        assert "ui.leave_legacy_multipage_mode" in calls, page

