"""The import floors of ../shared/DESIGN.md and frost/README.md, read from the source with `ast`:
a module imports only from its own floor or below, and `audit` and `rl` use only public names of
`train`, `data` and `text`."""

import ast
import os
import pathlib
import subprocess
import sys

FLOORS = [
    {"atomic", "config", "kernels", "stats", "tree"},
    {"optim", "text", "parallel", "checkpoint"},
    {"nn", "data", "datasets"},
    {"models", "interop"},
    {"train"},
    {"audit", "rl"},
    {"cli"},
]
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}
ROOT = pathlib.Path(__file__).parent.parent / "frost"


def _imports(path: pathlib.Path):
    """(line, imported frost package, the names taken from it) for each `frost.X` import."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            package = (
                path.relative_to(ROOT).parts[0] if len(path.relative_to(ROOT).parts) > 1 else None
            )
            if package is not None:
                yield node.lineno, package, [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("frost."):
            yield node.lineno, node.module.split(".")[1], [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "frost":
            for a in node.names:
                yield node.lineno, a.name, []
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("frost."):
                    yield node.lineno, a.name.split(".")[1], []


def test_every_module_imports_only_its_floor_or_below():
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        me = parts[0].removesuffix(".py")
        if me == "__init__":
            continue  # the package's lazy re-exports
        for line, target, names in _imports(path):
            if FLOOR[target] > FLOOR[me]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({me}) imports {target}")
            private = [n for n in names if n.startswith("_")]
            if me in ("audit", "rl") and target in ("train", "data", "text") and private:
                wrong.append(f"{path.relative_to(ROOT)}:{line} takes private {private} of {target}")
    assert not wrong, "\n".join(wrong)


def test_every_package_has_a_floor():
    packages = {p.name.removesuffix(".py") for p in ROOT.iterdir() if p.name != "__init__.py"}
    assert packages - {"__pycache__", "README.md"} == set(FLOOR)


def test_nn_does_not_import_optim():
    """nn sits above optim's floor but does not use it: loss scaling, an optimizer wrapper, lives
    in frost/optim/scaling.py (DESIGN.md)."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports optim"
        for path in sorted((ROOT / "nn").rglob("*.py"))
        for line, target, _ in _imports(path)
        if target == "optim"
    ]
    assert not wrong, "\n".join(wrong)


def test_every_module_imports_first():
    """Each module imports as the first frost module of a process: an import cycle (such as
    frost.datasets -> frost.data -> frost.datasets) fails here, whatever order the package's own
    __init__ happens to use. One subprocess; frost's modules are dropped between imports."""
    modules = [
        ".".join(("frost",) + p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in sorted(ROOT.rglob("*.py"))
    ]
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    for m in [m for m in sys.modules if m == 'frost' or m.startswith('frost.')]:\n"
        "        del sys.modules[m]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        print(name, type(e).__name__, e)\n"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and not out.stdout, out.stdout + out.stderr


def test_line_count_counts_what_a_reader_reads():
    """tools/loc.py counts packed assignments and `;` statements as the lines they stand for, so
    packing code saves nothing; unpacking a call's result is one line."""
    sys.path.insert(0, str(ROOT.parent / "tools"))
    import loc

    packed = "a, b, c = x, y, z\nd = 1; e = 2\nif a:\n    f = 1; g = 2; h = 3\n"
    one_per_line = "a = x\nb = y\nc = z\nd = 1\ne = 2\nif a:\n    f = 1\n    g = 2\n    h = 3\n"
    assert loc.code_lines(packed) == loc.code_lines(one_per_line) == 9
    assert loc.code_lines("a, b = f()\n") == 1
