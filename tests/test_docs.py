"""The public API documents itself: every public function and class has a docstring whose
`Arguments:` section names each parameter (Google style, as DESIGN.md says), a `Returns:` (or
`Yields:`) section where it returns a value, and a type hint on each parameter.

The public API is listed once, in tools/api.py, which also builds the docs site's reference from
these docstrings."""

import ast
import dataclasses
import inspect
import pathlib
import re
import sys
import textwrap

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "tools"))
import api  # noqa: E402

SECTION = re.compile(r"^(\w[\w ]*):\s*$")
ENTRY = re.compile(r"^(\*{0,2}\w+)(?: \([^)]*\))?:(?:\s|$)")


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
    real = {p.name for p in parameters(obj)}
    if not (inspect.isclass(obj) and issubclass(obj, Exception)):
        for extra in found.get("Arguments", []):
            if extra not in real:
                wrong.append(f"{name}: documents {extra!r}, which is not an argument")
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


PUBLIC = api.every_public_object()


@pytest.mark.parametrize("name, obj", PUBLIC, ids=[name for name, _ in PUBLIC])
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
            z: not an argument.
        """
        return x + y

    assert problems("good", good) == []
    assert problems("bad", bad) == [
        "bad: documents 'z', which is not an argument",
        "bad: argument 'x' is not in its Arguments: section",
        "bad: argument 'x' has no type hint",
        "bad: returns a value without a Returns: section",
    ]
