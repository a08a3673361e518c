"""Entry point of a worker process, run with `runpy.run_path` (global: conn, a pipe to the loader).

`frost/__init__.py` imports every sub-package, JAX included (about 2 s and a few hundred MB per
process). A data worker needs only numpy and frost.data, so when `frost` is not imported yet we
register an empty package object for it: `import frost.data...` then finds the sub-packages on
disk without running frost/__init__.py. The main process is never affected.
"""
import os
import sys
import types

if "frost" not in sys.modules:
    package = types.ModuleType("frost")
    package.__path__ = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    sys.modules["frost"] = package

from frost.data.loader import _worker_main  # noqa: E402

_worker_main(conn)  # noqa: F821 (conn comes from run_path's init_globals)
