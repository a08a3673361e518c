"""The public API documents itself: every public function and class has a docstring whose
`Arguments:` section names each parameter (Google style, as DESIGN.md says), a `Returns:` (or
`Yields:`) section where it returns a value, and a type hint on each parameter.

The public API is every name in a package's `__all__`, and every public function and class defined
in the modules that `frost/__init__.py` names without re-exporting (datasets, parallel, interop,
checkpoint, and rl's search and envs). The docs site's API reference is built from these."""

import ast
import dataclasses
import importlib
import inspect
import re
import textwrap

import pytest

PACKAGES = [
    "frost.nn",
    "frost.optim",
    "frost.data",
    "frost.text",
    "frost.models",
    "frost.train",
    "frost.kernels",
]
MODULES = [
    "frost.datasets",
    "frost.parallel",
    "frost.interop",
    "frost.checkpoint",
    "frost.rl.search",
    "frost.rl.envs",
]
SECTION = re.compile(r"^(\w[\w ]*):\s*$")
ENTRY = re.compile(r"^(\*{0,2}\w+)(?: \([^)]*\))?:(?:\s|$)")


def public_objects():
    """(qualified name, object) for every public function and class."""
    found = {}
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                found[f"{package}.{name}"] = obj
    for path in MODULES:
        module = importlib.import_module(path)
        for name, obj in vars(module).items():
            own = getattr(obj, "__module__", None) == path
            if (
                not name.startswith("_")
                and own
                and (inspect.isfunction(obj) or inspect.isclass(obj))
            ):
                found[f"{path}.{name}"] = obj
    return sorted(found.items())


def sections(doc: str) -> dict[str, list[str]]:
    """A Google-style docstring's sections: {"Arguments": [entry names], "Returns": [...], ...}."""
    out, current, indent = {}, None, None
    for line in doc.splitlines():
        stripped = line.strip()
        header = SECTION.match(line)
        if header and not line.startswith(" "):
            current, indent = header.group(1), None
            out[current] = []
        elif current and stripped:
            width = len(line) - len(line.lstrip())
            if indent is None:
                indent = width
            if width < indent:
                current = None  # the section ended: prose follows at the docstring's margin
            elif width == indent and (entry := ENTRY.match(stripped)):
                out[current].append(entry.group(1).lstrip("*"))
    return out


def parameters(obj) -> list[inspect.Parameter]:
    """The parameters a caller passes: a function's, or a class's constructor's."""
    if inspect.isclass(obj) and issubclass(obj, Exception):
        return []
    if inspect.isclass(obj) and hasattr(obj, "_fields"):  # a NamedTuple
        return [inspect.Parameter(f, inspect.Parameter.POSITIONAL_OR_KEYWORD) for f in obj._fields]
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    return [p for p in signature.parameters.values() if p.name not in ("self", "cls")]


def returns_value(function) -> bool:
    """Whether the function's own body has a `return <value>` (nested functions aside)."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return False
    tree = ast.parse(source).body[0]
    stack = list(ast.iter_child_nodes(tree))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            is_none = isinstance(node.value, ast.Constant) and node.value.value is None
            if not is_none:
                return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def is_generator(function) -> bool:
    return inspect.isgeneratorfunction(function)


def problems(name: str, obj) -> list[str]:
    doc = inspect.getdoc(obj) if obj.__doc__ else None
    if (
        inspect.isclass(obj)
        and dataclasses.is_dataclass(obj)
        and doc
        and doc.startswith(obj.__name__ + "(")
    ):
        doc = None  # the dataclass's generated signature, not a docstring
    if not doc:
        return [f"{name}: no docstring"]
    found = sections(doc)
    documented = set(found.get("Arguments", [])) | set(found.get("Attributes", []))
    wrong = []
    for p in parameters(obj):
        if p.name not in documented:
            wrong.append(f"{name}: argument {p.name!r} is not in its Arguments: section")
        variadic = p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        if p.annotation is inspect.Parameter.empty and not inspect.isclass(obj) and not variadic:
            wrong.append(f"{name}: argument {p.name!r} has no type hint")
    if inspect.isfunction(obj):
        if is_generator(obj) and "Yields" not in found:
            wrong.append(f"{name}: a generator without a Yields: section")
        elif not is_generator(obj) and returns_value(obj) and "Returns" not in found:
            wrong.append(f"{name}: returns a value without a Returns: section")
    return wrong


@pytest.mark.parametrize("name, obj", public_objects(), ids=[n for n, _ in public_objects()])
def test_public_api_is_documented(name, obj):
    wrong = problems(name, obj)
    assert not wrong, "\n".join(wrong)


def test_the_docstring_check_can_fail():
    """The check itself: a missing argument, a missing Returns: and a missing hint are each found,
    and a complete docstring passes."""

    def good(x: int, *, key: int = 0) -> int:
        """Add.

        Arguments:
            x: a number.
            key: another.

        Returns:
            Their sum.
        """
        return x + key

    def bad(x, y: int):
        """Add.

        Arguments:
            y (int): another.
        """
        return x + y

    assert problems("good", good) == []
    assert problems("bad", bad) == [
        "bad: argument 'x' is not in its Arguments: section",
        "bad: argument 'x' has no type hint",
        "bad: returns a value without a Returns: section",
    ]
