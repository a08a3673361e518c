"""The public API, listed once: for the docs site's reference pages and for tests/test_docs.py.

The public API is every name in a package's `__all__` (frost.nn, optim, data, text, models,
train, kernels), and every public function and class defined in the modules that
`frost/__init__.py` names without re-exporting them (datasets, parallel, checkpoint, interop,
and rl's search, envs and minatar).

As an mkdocs hook (mkdocs.yml: `hooks: [tools/api.py]`), it replaces a page's line
`<!-- api frost.nn -->` with the package's docstring and one mkdocstrings block per public object,
each under the name a user imports it by. So the reference shows exactly what the test checks.
"""

import importlib
import inspect
import re

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
    "frost.checkpoint",
    "frost.stats",
    "frost.interop",
    "frost.rl.search",
    "frost.rl.envs",
    "frost.rl.minatar",
]
MARKER = re.compile(r"^<!-- api (frost[\w.]*) -->$", re.MULTILINE)


def _is_api(obj) -> bool:
    return inspect.isfunction(obj) or inspect.isclass(obj)


def public_objects(module_name: str) -> list[tuple[str, object]]:
    """(the name a user imports it by, the object), in the module's order, for one package or
    module of PACKAGES or MODULES."""
    module = importlib.import_module(module_name)
    if module_name in PACKAGES:
        names = [n for n in module.__all__ if _is_api(getattr(module, n))]
    else:
        names = [
            n
            for n, obj in vars(module).items()
            if not n.startswith("_") and _is_api(obj) and obj.__module__ == module_name
        ]
    return [(f"{module_name}.{n}", getattr(module, n)) for n in names]


def every_public_object() -> list[tuple[str, object]]:
    """public_objects of every package and module, sorted by name."""
    found = {}
    for module_name in PACKAGES + MODULES:
        found.update(public_objects(module_name))
    return sorted(found.items())


def reference(module_name: str) -> str:
    """The markdown of one reference page: the module's docstring, then each public object."""
    blocks = [
        f"::: {module_name}\n    options:\n      members: false\n      show_root_heading: false"
    ]
    for _, obj in public_objects(module_name):
        where = f"{obj.__module__}.{obj.__qualname__}"  # where griffe finds it, lazy packages too
        blocks.append(f"::: {where}")
    return "\n\n".join(blocks)


def on_page_markdown(markdown: str, **kwargs) -> str:
    """mkdocs hook: expand each `<!-- api MODULE -->` line into its reference."""
    return MARKER.sub(lambda m: reference(m.group(1)), markdown)
