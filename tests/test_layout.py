"""The engine's shape: packages along the data flow, imports that only go one way, no private names, short modules.

The import graph is read from the source with `ast` (lazy imports inside functions included), so a cycle that
only shows when a rarely used function runs is still caught here.
"""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import engine

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "engine"

# Layers, bottom to top: a module may import its own layer and the layers below, never above.
LAYERS = [
    {"errors", "fields", "refs"},
    {"config"},
    {"runs", "hardware"},
    {"models", "data", "estimator"},
    {"training", "inference"},
    {"export"},
    {"views", "cli", "__main__", "__init__"},
]
# Packages side by side on one layer that must not import each other, with the reason (design.md §2).
FORBIDDEN = {
    ("data", "models"): "data takes a tokenizer from its caller and never loads models",
    ("estimator", "models"): "the estimator reads presets as data and never imports the model code",
    ("inference", "training"): "inference never imports training",
    ("hardware", "models"): "hardware asks about models, it does not import them",
}
LINE_LIMIT = 450
LINE_LIMIT_EXCEPTIONS = {"engine.estimator.memory": 800}  # one job: the memory terms (the issue allows it to stay larger)
MODEL_LIMIT = 350


def engine_modules() -> dict[str, Path]:
    """Every module of the engine package, walked with pkgutil: dotted name -> file."""
    found = {"engine": ENGINE / "__init__.py"}
    for info in pkgutil.walk_packages(engine.__path__, prefix="engine."):
        spec = info.module_finder.find_spec(info.name, None)
        found[info.name] = Path(spec.origin)
    return found


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> list[str]:
    """Absolute engine module names an ImportFrom node refers to (`from . import x` names module x)."""
    if node.level:
        base = _package_of(module, path).split(".")
        base = base[: len(base) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if not target.startswith("engine"):
        return []
    return [target] + [f"{target}.{a.name}" for a in node.names]


def import_graph() -> dict[str, set[str]]:
    modules = engine_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                deps.update(t for t in _resolve(name, path, node) if t in modules)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in modules)
        # A package's __init__ is imported with any of its modules; it is not a dependency in its own right.
        graph[name] = {d for d in deps if d != name and modules[d].name != "__init__.py"}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(top: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if top in layer)


def test_every_engine_module_belongs_to_a_layer():
    for module in engine_modules():
        assert any(_top(module) in layer for layer in LAYERS), f"{module}: add its package to LAYERS in this test"


def test_no_import_cycles_lazy_imports_included():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_imports_only_go_down_the_layers():
    wrong = []
    for module, deps in import_graph().items():
        for dep in deps:
            a, b = _top(module), _top(dep)
            if _layer(b) > _layer(a):
                wrong.append(f"{module} -> {dep} (layer {_layer(a)} imports layer {_layer(b)})")
            if (a, b) in FORBIDDEN:
                wrong.append(f"{module} -> {dep}: {FORBIDDEN[(a, b)]}")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_private_name_is_imported_across_modules():
    offenders = []
    for path in [*ENGINE.rglob("*.py"), ROOT / "app.py", *(ROOT / "bench").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("engine")):
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {a.name}" for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert not offenders, "private names imported from another module:\n" + "\n".join(offenders)


def test_modules_are_small_enough_to_read():
    too_long = []
    for module, path in engine_modules().items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        limit = MODEL_LIMIT if module == "engine.models.compact" else LINE_LIMIT_EXCEPTIONS.get(module, LINE_LIMIT)
        if lines > limit:
            too_long.append(f"{module}: {lines} lines (limit {limit})")
    assert not too_long, "\n".join(too_long)
