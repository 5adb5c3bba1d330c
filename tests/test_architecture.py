"""The layout's import rules, checked on the source with ``ast`` (lazy imports included).

Layers, bottom up (``../shared/architecture.md``):

* ground floor: ``errors``, ``seeding``, ``progress``, ``manifest``, ``io``, ``panel`` (and its label rules,
  ``labels``), ``configs``,
  ``checks``, ``bounded``, ``tiers`` (and the top-level ``aumann/__init__``) — import nothing of ours above them;
* ``attribution`` (the pure maths core) — imports only the ground floor;
* ``data`` and ``simulators`` — import the ground floor; ``simulators`` may call attribution's public
  indicator-evaluation helper (:mod:`aumann.attribution.indicators`);
* ``scenarios`` — import ``simulators`` and ``attribution``;
* ``evaluation`` — imports ``scenarios``, ``simulators`` and ``attribution``; only ``studies`` and
  ``cli`` import it;
* ``studies`` — above all of those; ``cli`` on top (with ``aumann/__main__``, ``python -m aumann``).

An edge is any ``import``/``from … import`` anywhere in a module (inside functions too) and any string
literal naming an ``aumann.…`` module (``importlib.import_module`` tables, lazy re-export maps).
"""

from __future__ import annotations

import ast
import functools
import itertools
from collections import defaultdict
from pathlib import Path

import aumann

PKG = Path(aumann.__file__).resolve().parent
GROUND = {"errors", "seeding", "progress", "manifest", "io", "panel", "labels", "configs", "checks", "bounded", "npz",
          "records", "tiers", "__init__"}
ALLOWED: dict[str, set[str]] = {
    "ground": {"ground"},
    "attribution": {"ground", "attribution"},
    "data": {"ground", "data"},
    "simulators": {"ground", "simulators"},
    "scenarios": {"ground", "attribution", "simulators", "scenarios"},
    "evaluation": {"ground", "attribution", "simulators", "scenarios", "evaluation"},
    "studies": {"ground", "attribution", "simulators", "scenarios", "evaluation", "data", "studies"},
    "cli": {"ground", "attribution", "simulators", "scenarios", "evaluation", "data", "studies", "cli"},
}
#: the one sanctioned cross edge: simulators call attribution's indicator-evaluation helper
EXTRA = {("simulators", "aumann.attribution.indicators")}


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in PKG.rglob("*.py")}


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The module's syntax tree, parsed once per session (the tests only read it; the source does not
    change while they run)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def layer(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) == 1:
        return "ground"
    top = parts[1]
    if top == "__main__":  # ``python -m aumann``: the command line's entry point
        return "cli"
    return "ground" if top in GROUND else top


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module that ``name`` (a module or ``module.attribute``) refers to, or None outside aumann."""
    if not (name == "aumann" or name.startswith("aumann.")):
        return None
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(mod: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = parsed(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{a.name}" for a in node.names]  # a submodule, or an attribute of base
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("aumann."):
            if node.value.replace(".", "").replace("_", "").isalnum():
                names = [node.value]
        for n in names:
            target = resolve(n, modules)
            if target is not None and target != mod:
                out.add(target)
    return out


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    modules = all_modules()
    return {m: frozenset(imports_of(m, p, modules)) for m, p in modules.items()}


def graph() -> dict[str, set[str]]:
    """{module: the aumann modules it imports}, built once per session (a fresh copy for each caller)."""
    return {m: set(ts) for m, ts in _graph().items()}


def test_no_forbidden_edge():
    bad = []
    for mod, targets in graph().items():
        src = layer(mod)
        for t in sorted(targets):
            if layer(t) not in ALLOWED[src] and (src, t) not in EXTRA:
                bad.append(f"{mod} ({src}) -> {t} ({layer(t)})")
    assert not bad, "imports that break the layering:\n" + "\n".join(bad)


def test_only_studies_and_cli_import_evaluation():
    users = {m for m, ts in graph().items() if any(layer(t) == "evaluation" for t in ts)}
    assert {layer(m) for m in users} <= {"evaluation", "studies", "cli"}


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = itertools.count()

    def visit(v: str) -> None:
        index[v] = low[v] = next(counter)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
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

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    g = graph()
    # a package's face re-exporting its own modules is not a cycle: drop edges from a package to its children
    faces = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in g.items()}
    cycles = _cycles(faces)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_every_exception_class_lives_in_errors():
    where = defaultdict(list)
    for mod, path in all_modules().items():
        if mod == "aumann.errors":
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ClassDef):
                bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                if any(b.endswith(("Error", "Exception", "Warning")) or b in {"Exception", "BaseException"}
                       for b in bases):
                    where[mod].append(node.name)
    assert not where, f"exception classes outside aumann/errors.py: {dict(where)}"


def test_no_path_climbing_in_the_package():
    hits = [f"{m}" for m, p in all_modules().items() if "parents[" in p.read_text(encoding="utf-8")
            and "__file__" in p.read_text(encoding="utf-8")]
    assert not hits, f"modules that find files by climbing Path(__file__).parents[k]: {hits}"
