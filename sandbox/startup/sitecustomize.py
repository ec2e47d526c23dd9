"""hangar's mark of the end of a Python's start-up, for the verifier's observer.

Mounted read-only at the front of ``PYTHONPATH`` in a verifier's sandbox (never an agent's),
so every Python started there imports it last in its start-up, after ``site`` has run the
``.pth`` files. It runs the ``sitecustomize`` it hides (the image's, if any), then tells the
observer (hangar's helper, ``observe.c``) each import root and that the start-up is over,
by opening names in its own folder that do not exist: the observer sees the opens, nothing
is read or written. What a Python reads before that is its start-up, which the judge's
machinery needs to be the image's (see hangar/kinds/execution/images/takeover.py).
"""

import os as _os
import sys as _sys


def _hangar_mark():
    here = _os.path.dirname(_os.path.abspath(__file__))
    try:
        import importlib.machinery
        import importlib.util

        rest = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            _sys.modules["sitecustomize"] = module
            spec.loader.exec_module(module)
    finally:
        for root in _sys.path:
            name = root.encode("utf-8", "surrogateescape").hex()
            try:
                open(here + "/root/" + name).close()
            except OSError:
                pass
        try:
            open(here + "/started").close()
        except OSError:
            pass


_hangar_mark()
del _hangar_mark
