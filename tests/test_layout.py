"""The engine's shape: packages along the data flow, imports that only go one way, no private names, short modules;
and the page's: app.py a short entry, ui/ one short module per panel or shared part, gradio only on that side.

The import graph is read from the source with `ast` (lazy imports inside functions included), so a cycle that
only shows when a rarely used function runs is still caught here.
"""

from __future__ import annotations

import ast
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "engine"

# Layers, bottom to top: a module may import its own layer and the layers below, never above.
LAYERS = [
    {"errors", "fields", "cli_flags", "i18n", "refs", "sharing", "objectives", "benchmarks"},  # benchmarks: the curated task list (data); cli_flags: flags from the fields
    {"config", "mix_config"},  # mix_config: MixConfig (issue 34), one of the form classes config.py lists
    {"runs", "hardware", "run_access"},  # run_access: the one gate for what may be done with a run (beside runs)
    {"models", "data", "estimator", "space", "space_limits"},  # space: the demo limits size a base model through models.references
    {"training", "inference"},
    {"export"},
    {"views", "cli", "__main__", "__init__", "notebook"},  # notebook: the hosted-notebook steps (engine/notebook.py)
]
# Packages side by side on one layer that must not import each other, with the reason (design.md §2).
FORBIDDEN = {
    ("data", "models"): "data takes a tokenizer from its caller and never loads models",
    ("estimator", "models"): "the estimator reads presets as data and never imports the model code",
    ("inference", "training"): "inference never imports training",
    ("hardware", "models"): "hardware asks about models, it does not import them",
}
LINE_LIMIT = 450
LINE_LIMIT_EXCEPTIONS = {"engine.estimator.memory": 800,  # one job: the memory terms (the issue allows it to stay larger)
                         "engine.config": 600}  # every job's dataclass, each field's help inline (issue 28 added ddp/fsdp, issue 27 dpo/orpo/grpo fields, issue 34 BenchConfig)
MODEL_LIMIT = 350
UI = ROOT / "ui"
PAGE_LINE_LIMIT = 400  # a page module: one panel, or one part of one
ENTRY_LINE_LIMIT = 120  # app.py: arguments, sharing, login, launch


def engine_modules() -> dict[str, Path]:
    """Every module of the engine package, walked with pkgutil: dotted name -> file."""
    import engine

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
    for path in [*ENGINE.rglob("*.py"), ROOT / "app.py", *UI.glob("*.py"), *(ROOT / "bench").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(("engine", "ui"))):
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


def page_imports() -> dict[str, set[str]]:
    """Top-level names each page file imports (app and ui.X included, lazy imports too): module -> imported modules."""
    out: dict[str, set[str]] = {}
    for path in [ROOT / "app.py", *UI.glob("*.py")]:
        name = "app" if path.name == "app.py" else f"ui.{path.stem}"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level:
                deps.add(node.module or "")
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        out[name] = deps
    return out


def test_the_page_is_a_short_entry_and_short_panels():
    too_long = []
    for path in sorted(UI.glob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > PAGE_LINE_LIMIT:
            too_long.append(f"ui/{path.name}: {lines} lines (limit {PAGE_LINE_LIMIT})")
    entry = len((ROOT / "app.py").read_text(encoding="utf-8").splitlines())
    if entry > ENTRY_LINE_LIMIT:
        too_long.append(f"app.py: {entry} lines (limit {ENTRY_LINE_LIMIT}): builders and handlers belong in ui/")
    assert not too_long, "\n".join(too_long)
    for panel in ("estimator", "finetune", "playground", "language", "login", "mcp", "page"):
        assert (UI / f"{panel}.py").is_file(), f"ui/{panel}.py: each panel and shared page part has its own module"


def test_page_modules_import_one_way():
    """ui/ builds on engine/ and gradio; the engine never imports the page (nor gradio: test_no_gradio.py); the page's own
    modules import each other without a cycle, and none of them imports the entry."""
    graph = page_imports()
    wrong = [f"{m} imports the entry (app)" for m, deps in graph.items() if m != "app" and "app" in deps]
    ui_graph = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items() if m.startswith("ui.")}
    cycle = find_cycle(ui_graph)
    assert cycle is None, "import cycle in ui/: " + " -> ".join(cycle)
    for path in ENGINE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            wrong += [f"{path.relative_to(ROOT)}: imports {n} (the engine never imports the page)" for n in names if n in ("app", "ui") or n.startswith("ui.")]
    assert not wrong, "\n".join(wrong)


def import_levels(graph: dict[str, set[str]]) -> dict[str, int]:
    """Level of each module: 1 for a module that imports no other engine module, else 1 + its highest import."""
    levels: dict[str, int] = {}

    def level(node: str, seen: frozenset[str] = frozenset()) -> int:
        if node not in levels:
            deps = [d for d in graph.get(node, ()) if d not in seen]  # a cycle would recurse forever; it is reported apart
            levels[node] = 1 + max((level(d, seen | {node}) for d in deps), default=0)
        return levels[node]

    for node in graph:
        level(node)
    return levels


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Groups of modules that import each other in a loop (Tarjan); each group of two or more is one cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in graph.get(node, ()):
            if dep not in index:
                connect(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return groups


def layout_report() -> str:
    """The numbers the layout issue asks for, measured from the code: `python tests/test_layout.py`."""
    modules = engine_modules()
    graph = import_graph()
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in modules.items()}
    per_package: dict[str, int] = {}
    for m, p in modules.items():
        if p.name != "__init__.py":
            pkg = m.rsplit(".", 1)[0] if m.count(".") > 1 else "engine"
            per_package[pkg] = per_package.get(pkg, 0) + 1
    largest = max(sizes, key=sizes.get)
    cycles = strongly_connected(graph)
    app_lines = len((ROOT / "app.py").read_text(encoding="utf-8").splitlines())
    ui_sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in sorted(UI.glob("*.py"))}
    lines = [f"modules (without __init__): {sum(per_package.values())}"]
    lines += [f"  {pkg}: {n}" for pkg, n in sorted(per_package.items())]
    lines += [
        f"largest module: {largest} ({sizes[largest]} lines)",
        f"import levels: {max(import_levels(graph).values())}",
        f"import cycles: {len(cycles)}" + "".join(f"\n  {sorted(group)}" for group in cycles),
        f"app.py: {app_lines} lines",
        f"ui/: {len(ui_sizes)} modules, largest {max(ui_sizes, key=ui_sizes.get)} ({max(ui_sizes.values())} lines)",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(layout_report())


def test_the_public_api_table_matches_what_engine_exports():
    """engine/__init__.py's docstring table lists exactly the lazily exported names, each where it is defined."""
    import engine

    rows = [line.split() for line in (engine.__doc__ or "").splitlines() if line.split() and line.split()[0] in engine._LAZY]
    assert {name: module for name, module, *_ in rows} == {name: f"engine.{module}" for name, module in engine._LAZY.items()}
    for name in engine._LAZY:
        assert getattr(engine, name) is not None, name
