"""The Lesson page's shape (issue 59): a thin page over one module per step behind a registry, its
session-state keys declared once in pages/lesson_steps/keys.py (no key spelled as a bare string anywhere else
in the page), and no function over 60 lines or module over 450 lines in it."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "pages" / "lesson.py", *sorted((ROOT / "pages" / "lesson_steps").glob("*.py"))]
KEYS = ROOT / "pages" / "lesson_steps" / "keys.py"
LITERAL = (ast.Constant, ast.JoinedStr)


def test_the_steps_are_one_module_each_in_order():
    from pages.lesson_steps import registry

    assert list(registry.STEPS) == list(range(1, 12))
    modules = {m.__name__ for m in registry.MODULES}
    declaring = {f"pages.lesson_steps.{p.stem}" for p in FILES[1:] if "\nSTEP = Step(" in p.read_text()}
    assert declaring == modules and len(modules) == 11  # every step module is registered, once
    assert all(s.title and callable(s.draw) for s in registry.STEPS.values())


def _strings(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node


def _declared() -> tuple[str, ...]:
    """Every key keys.py declares and the fixed start of every key it builds ("lesson_q", "lesson_own_", ...).
    """
    return tuple({n.value for n in _strings(KEYS) if n.value.startswith("lesson_") and n.value != "lesson_"})


def _bare_keys(path: Path, declared: tuple[str, ...]) -> list[str]:
    """Session-state keys written as string literals: a widget's key=, st.session_state["..."] and its
    get/pop/setdefault("..."), and any literal that is (or starts like) a key keys.py declares."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        state_call = isinstance(node, ast.Call) and ast.unparse(node.func).startswith("st.session_state.")
        if isinstance(node, ast.keyword) and node.arg == "key" and isinstance(node.value, LITERAL):
            out.append(f"{path.name}:{node.value.lineno} key={ast.unparse(node.value)}")
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "st.session_state" \
                and isinstance(node.slice, LITERAL):
            out.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
        elif state_call and node.args and isinstance(node.args[0], LITERAL):
            out.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return out + [f"{path.name}:{n.lineno} {n.value!r}" for n in _strings(path)
                  if n.value.startswith(declared)]


def test_session_state_keys_are_declared_once():
    declared = _declared()
    assert "lesson_answers" in declared and "lesson_q" in declared
    assert _bare_keys(KEYS, declared)  # the check finds the keys where they are declared (it can fail)
    assert [b for p in FILES if p != KEYS for b in _bare_keys(p, declared)] == []


def test_no_long_function_or_module():
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        assert len(text.splitlines()) <= 450, path.name
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno + 1 <= 60, f"{path.name}: {node.name}"
