"""The results manifest: every table and figure the README, the manual's results pages and the pages show from
shipped results, with the command that makes it, the files it reads and where it is shown
(`assets/results/manifest.json`; `python -m editkit results check | write | prune`).

An entry's `kind` says how its files are found and its table rebuilt (`KINDS`): a ripple table's files are named by
a hash of today's settings (ripple_eval.results_path), so an hyperparameter added without a NEUTRAL value renames
them and the check says which setting changed; a lifelong or AIE file is named by hand, and its runs' recorded
hyperparameters must be today's defaults with the entry's declared `hparams` on top. `reads` lists the files (their
names carry the settings hashes) and `shown` where the entry appears: a Markdown file holds the rebuilt table
between `<!-- results: NAME -->` and `<!-- /results -->`, a page names the entry (it loads it with `shipped`).
`check` resolves every entry against the committed files and today's defaults and compares each shown table with
its rebuild; each problem names the entry and the command that rebuilds it. `prune` lists the shipped result
files no entry reads.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import EditkitError
from ..core.paths import ROOT
from ..core.results import JsonObject, Result

MANIFEST = Path("assets") / "results" / "manifest.json"
RESULTS = Path("assets") / "results"  # what prune looks through (the manifest itself is not a result)
BLOCK = re.compile(r"<!-- results: (?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- /results -->", re.DOTALL)


@dataclass(frozen=True)
class Problem:
    entry: str
    message: str
    command: str

    def __str__(self) -> str:
        return f"{self.entry}: {self.message} (rebuild: {self.command})"


@dataclass
class Check(Result):
    """What `results check` found: the entries checked and every problem, each naming its entry and command."""

    entries: list[str]
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def headline(self) -> str:
        if self.ok:
            return f"results check: {len(self.entries)} entries resolve and match what is shown ({self.seconds:.1f} s)"
        return (f"results check: {len(self.problems)} problem(s) in {len(self.entries)} entries:\n"
                + "\n".join(f"- {p}" for p in self.problems))

    def to_json(self) -> JsonObject:
        return {"entries": self.entries, "ok": self.ok, "seconds": round(self.seconds, 2),
                "problems": [{"entry": p.entry, "message": p.message, "command": p.command} for p in self.problems]}

    @classmethod
    def _from_json(cls, d: dict) -> "Check":
        return cls(d["entries"], [Problem(**p) for p in d["problems"]], d.get("seconds", 0.0))


def load(root: Path = ROOT) -> list[dict]:
    """The manifest's entries (a list of JSON objects)."""
    path = Path(root) / MANIFEST
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["entries"]
    except (OSError, ValueError, KeyError) as exc:
        raise EditkitError(f"cannot read the results manifest {path}: {exc}") from None
    names = [e.get("name") for e in entries]
    if len(set(names)) != len(names) or not all(names):
        raise EditkitError(f"{path}: every entry needs a name of its own")
    return entries


def entry(name: str, root: Path = ROOT) -> dict:
    """One entry by name (a page loads what it shows this way, so the check can find who shows it)."""
    for e in load(root):
        if e["name"] == name:
            return e
    raise EditkitError(f"no results manifest entry {name!r}")


def _kind(e: dict):
    from .manifest_kinds import KINDS

    if e.get("kind") not in KINDS:
        raise EditkitError(f"results manifest entry {e.get('name')!r}: kind must be one of {', '.join(KINDS)}")
    return KINDS[e["kind"]]


def shipped(name: str, root: Path = ROOT):
    """What an entry's files hold, as its kind reads them (a page's data: e.g. the operating points)."""
    e = entry(name, root)
    return _kind(e).data(e, Path(root))


def operating_points(method: str, model: str, root: Path = ROOT):
    """The shipped trade-off of `method`'s strength knob on `model` (evaluation/points.OperatingPoints), from the
    first manifest entry that holds one (a sweep file, or a ripple entry's `points`); None when none ships."""
    for e in load(root):
        kind = _kind(e)
        if e.get("loader") == "points":
            sweep = kind.data(e, Path(root))
            if (sweep.method, sweep.model) == (method, model):
                return sweep.points()
        elif (e.get("points") or {}).get("method") == method and \
                model in {c["model"] for c in e.get("columns", [])}:
            return kind.data(e, Path(root))[model]
    return None


def _blocks(text: str) -> dict[str, str]:
    return {m["name"]: m["body"] for m in BLOCK.finditer(text)}


def _shown(e: dict, root: Path, rebuilt: str | None) -> list[str]:
    """Where the entry is shown, each place checked: `FILE#TEXT` must contain TEXT (a figure's file, the loader a
    page calls); a Markdown FILE must hold the entry's block, equal to the rebuild; any other FILE (a page) must
    name the entry (it loads it with `shipped`)."""
    out = []
    for place in e.get("shown", []):
        name, _, text_ = place.partition("#")
        path = root / name
        if not path.exists():
            out.append(f"it is shown in {name}, which does not exist")
            continue
        text = path.read_text(encoding="utf-8")
        if text_:
            if text_ not in text:
                out.append(f"{name} does not show it (no {text_!r} there)")
        elif path.suffix == ".md":
            body = _blocks(text).get(e["name"])
            if body is None:
                out.append(f"{name} has no block <!-- results: {e['name']} --> ... <!-- /results -->")
            elif rebuilt is not None and body.strip() != rebuilt.strip():
                out.append(f"the table shown in {name} differs from the one its rows give now")
        elif f'"{e["name"]}"' not in text:
            out.append(f"{name} does not load it (no \"{e['name']}\" there)")
    return out


def _few(paths: list[str]) -> str:
    if not paths:
        return "nothing else"
    return ", ".join(Path(p).name for p in paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def check(names: list[str] | None = None, root: Path = ROOT) -> Check:
    """Every entry (or those named): its files resolve under today's defaults, their rows are complete, and each
    shown table equals its rebuild. Reads files only: no model, no edit."""
    from .manifest_kinds import forget

    start = time.perf_counter()
    root = Path(root)
    forget()
    entries = [e for e in load(root) if names is None or e["name"] in names]
    if names:
        unknown = sorted(set(names) - {e["name"] for e in entries})
        if unknown:
            raise EditkitError(f"no results manifest entry {', '.join(map(repr, unknown))}")
    problems = []
    for e in entries:
        command = e.get("command", "(no command given)")
        try:
            kind = _kind(e)
            found = kind.problems(e, root)
            expected = kind.reads(e, root)
            listed = list(e.get("reads", []))
            if listed != expected:
                gone = [p for p in listed if p not in expected]
                new = [p for p in expected if p not in listed]
                found.append(f"today's defaults read {_few(new)} where the manifest lists {_few(gone)}")
            rebuilt = kind.render(e, root) if not found else None
            found += _shown(e, root, rebuilt)
        except EditkitError as exc:
            found = [str(exc)]
        problems += [Problem(e["name"], m, command) for m in found]
    return Check([e["name"] for e in entries], problems, time.perf_counter() - start)


def _replace_block(text: str, name: str, table: str) -> str:
    def one(m) -> str:
        return m.group(0) if m["name"] != name else f"<!-- results: {name} -->\n{table.strip()}\n<!-- /results -->"

    return BLOCK.sub(one, text)


def write(names: list[str] | None = None, root: Path = ROOT) -> list[str]:
    """Rebuild the named entries (all by default): each one's `reads` from today's defaults and its Markdown blocks
    from its rows. Refuses an entry whose files do not resolve (run its command first). The places changed."""
    root = Path(root)
    data = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    changed = []
    for e in data["entries"]:
        if names is not None and e["name"] not in names:
            continue
        kind = _kind(e)
        found = kind.problems(e, root)
        if found:
            raise EditkitError(f"{e['name']}: {found[0]}; run `{e.get('command')}` first")
        reads = kind.reads(e, root)
        if reads != e.get("reads"):
            e["reads"] = reads
            changed.append(str(MANIFEST))
        table = kind.render(e, root)
        for place in e.get("shown", []):
            path = root / place
            if table is None or path.suffix != ".md" or "#" in place:
                continue
            text = path.read_text(encoding="utf-8")
            if e["name"] not in _blocks(text):
                raise EditkitError(f"{place} has no block <!-- results: {e['name']} --> ... <!-- /results --> "
                                   "to write the table into")
            new = _replace_block(text, e["name"], table)
            if new != text:
                path.write_text(new, encoding="utf-8")
                changed.append(place)
    (root / MANIFEST).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return sorted(set(changed))


def orphans(root: Path = ROOT) -> list[Path]:
    """Shipped result files (under assets/results/) that no manifest entry reads."""
    root = Path(root)
    read = {str(Path(p)) for e in load(root) for p in e.get("reads", [])}
    files = [p for p in sorted((root / RESULTS).rglob("*")) if p.is_file() and p != root / MANIFEST]
    return [p for p in files if str(p.relative_to(root)) not in read]


def prune(delete: bool = False, root: Path = ROOT) -> list[str]:
    """The shipped result files no entry reads; with `delete` they are removed."""
    out = orphans(root)
    if delete:
        for p in out:
            p.unlink()
    return [str(p.relative_to(Path(root))) for p in out]
