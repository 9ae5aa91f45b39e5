"""The floors of the code base: a module imports only from its own floor and the floors below it, the packages of a
floor whose rule says "never one another" do not import one another, and no module imports itself back through
others (no import cycles). Every import counts, also one inside a function; one under `if TYPE_CHECKING:`
names a type only (a runner typed by the LM that owns it): it counts for the floors, not for cycles, since it
never runs. The floors are read from the table in the manual's architecture page (docs/architecture.md), so
the manual and this test cannot disagree: a new package needs a row there first. Also: editkit/ never imports
Streamlit, and only editkit/figures/ imports plotly."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def floor_table() -> list[dict]:
    """The rows of the architecture page's floors table: {"floor": n, "name", "units": [...], "siblings": bool}."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert "\n## Layout\n" in text, "docs/architecture.md has no '## Layout' section"
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        m = re.match(r"\|\s*(\d+)\.\s*([^|]+?)\s*\|([^|]+)\|([^|]+)\|\s*$", line)
        if m:
            rows.append({"floor": int(m.group(1)), "name": m.group(2),
                         "units": [u.removesuffix(".py").rstrip("/") for u in re.findall(r"`([^`]+)`", m.group(3))],
                         "siblings": "never one another" in m.group(4)})
    assert [r["floor"] for r in rows] == list(range(1, len(rows) + 1)) and rows, "floors must be numbered 1, 2, ..."
    return rows


def unit_floors() -> tuple[dict[str, int], set[int]]:
    """unit -> floor, and the floors whose units must not import one another."""
    floors, siblings = {}, set()
    for row in floor_table():
        for unit in row["units"]:
            assert unit not in floors, f"{unit} is on two floors of the architecture table"
            floors[unit] = row["floor"]
        if row["siblings"]:
            siblings.add(row["floor"])
    return floors, siblings


def sources() -> dict[str, Path]:
    """Dotted module name -> file, for editkit/, app.py and pages/."""
    files = [*(ROOT / "editkit").rglob("*.py"), ROOT / "app.py", *(ROOT / "pages").rglob("*.py")]
    out = {}
    for path in files:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def unit_of(module: str) -> str | None:
    """The table's unit a module belongs to ("editkit.tracing.engine" -> "tracing"); None outside the project. The
    editkit package's own __init__ is the unit "editkit"."""
    parts = module.split(".")
    if parts[0] == "editkit":
        return parts[1] if len(parts) > 1 else "editkit"
    if parts[0] in ("app", "pages"):
        return parts[0]
    return None


def _type_only(tree: ast.AST) -> set[int]:
    """The ids of the import nodes under `if TYPE_CHECKING:` (imports that name types for the checker)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for part in node.body for n in ast.walk(part)}
    return out


def imports(module: str, path: Path, known: dict[str, Path], types: bool = True):
    """(line, imported module) for every import statement of the file, wherever it stands; `from a import b` names
    the module a.b when b is a module of the project, else a. `types=False` leaves out the type-only ones."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip = set() if types else _type_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            for alias in node.names:
                full = f"{source}.{alias.name}"
                yield node.lineno, full if full in known else source


def violations() -> dict[str, int]:
    """"file -> module" for each import that goes up a floor or crosses between siblings, with its line."""
    floors, siblings = unit_floors()
    known = sources()
    found = {}
    for module, path in known.items():
        here = floors[unit_of(module)]
        for line, target in imports(module, path, known):
            other = unit_of(target)
            if other is None or other not in floors:
                continue
            there = floors[other]
            if there > here or (there == here and here in siblings and other != unit_of(module)):
                found.setdefault(f"{path.relative_to(ROOT)} -> {target}", line)
    return found


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project's modules it imports (a package's import counts as its __init__'s)."""
    graph = {}
    for module, path in known.items():
        graph[module] = {t for _, t in imports(module, path, known, types=False)
                         if t in known and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_is_on_a_floor_and_every_floor_unit_exists():
    floors, _ = unit_floors()
    units = {unit_of(m) for m in sources()}
    assert not units - set(floors), f"add these to docs/architecture.md's table: {sorted(units - set(floors))}"
    assert not set(floors) - units, f"docs/architecture.md's table lists missing modules: {sorted(set(floors) - units)}"


def test_no_import_goes_up_a_floor():
    found = violations()
    assert not found, "imports that go up a floor (docs/architecture.md, Layout):\n" + "\n".join(
        f"  {k} (line {v})" for k, v in sorted(found.items()))


def test_no_import_cycles():
    found = cycles(import_graph(sources()))
    assert not found, "import cycles:\n" + "\n".join("  " + " <-> ".join(c) for c in found)


def test_the_rules_see_lazy_imports_siblings_and_cycles(tmp_path):
    """The checker on made-up files: an import inside a function and one between siblings are both found, and a
    cycle through a lazy import is a cycle."""
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from ..evaluation import sweep\n    from ..tracing import trace\n")
    got = list(imports("editkit.editing.x", path, {"editkit.evaluation.sweep": path}))
    assert got == [(2, "editkit.evaluation.sweep"), (3, "editkit.tracing")]
    path.write_text("from typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from ..evaluation import sweep\n")
    assert list(imports("editkit.editing.x", path, {})) == [(1, "typing"), (3, "editkit.evaluation")]
    assert list(imports("editkit.editing.x", path, {}, types=False)) == [(1, "typing")]
    floors, siblings = unit_floors()
    assert floors["evaluation"] > floors["editing"] and floors["tracing"] == floors["editing"] in siblings
    assert floors["core"] < floors["model"] < floors["tracing"] < floors["evaluation"] < floors["cli"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _importers(name: str, where) -> list[str]:
    out = []
    for module, path in sources().items():
        if not where(module):
            continue
        for line, target in imports(module, path, {}):
            if target == name or target.startswith(name + "."):
                out.append(f"{path.relative_to(ROOT)}:{line}")
    return out


def test_editkit_never_imports_streamlit():
    assert not _importers("streamlit", lambda m: m.startswith("editkit"))


def test_only_figures_import_plotly():
    assert not _importers("plotly", lambda m: not m.startswith("editkit.figures"))
