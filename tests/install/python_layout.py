#!/usr/bin/env python3
"""The ctypes structs of python/pipebench are checked against the library's C layout at import:
the real ones pass, and one broken on purpose (a field resized, one missing, one renamed, in a
copy of the package imported afresh) fails the import with a message naming it.

Environment: PIPEBENCH_LIBRARY (libpipebench.so)."""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.normpath(os.path.join(HERE, "..", "..", "python", "pipebench"))
sys.path.insert(0, os.path.dirname(PKG))
failed = 0


def check(cond, what):
    global failed
    print(("ok " if cond else "FAIL ") + what)
    failed += 0 if cond else 1


import pipebench  # noqa: E402  (checks all twelve structs)

check(len(pipebench._STRUCTS) == 12, "twelve structs are checked at import")

# a field resized: workers as int64 instead of int
fields = [(n, ctypes.c_int64 if n == "workers" else t) for n, t in pipebench._LoaderParams._fields_]
Broken = type("_LoaderParams", (ctypes.Structure,), {"_fields_": fields})
try:
    pipebench._check_layout(Broken, "pb_loader_params")
    check(False, "a resized field is refused")
except pipebench.LayoutError as e:
    msg = str(e)
    check("workers" in msg and "pb_loader_params" in msg and "_LoaderParams" in msg,
          "a resized field is refused, naming the field and both structs: " + msg[:160])

# a struct the library does not describe
try:
    pipebench._check_layout(pipebench._Error, "pb_no_such_struct")
    check(False, "an unknown struct is refused")
except pipebench.LayoutError as e:
    check("pb_no_such_struct" in str(e), "an unknown struct is refused")


def import_edited(old, new):
    """Imports a copy of the package with `old` replaced by `new` in __init__.py; (rc, stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        dst = os.path.join(tmp, "pipebench")
        shutil.copytree(PKG, dst, ignore=shutil.ignore_patterns("__pycache__"))
        init = os.path.join(dst, "__init__.py")
        text = open(init).read()
        assert old in text, old
        open(init, "w").write(text.replace(old, new, 1))
        r = subprocess.run([sys.executable, "-c", "import pipebench"], cwd=tmp,
                           capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=tmp, PIPEBENCH_LIBRARY=os.path.abspath(
                               os.environ["PIPEBENCH_LIBRARY"])))
        return r.returncode, r.stderr


rc, err = import_edited('("epochs", ctypes.c_int),', '("epochs", ctypes.c_int64),')
check(rc != 0 and "LayoutError" in err and "_TrainParams" in err and "epochs" in err,
      "import fails when _TrainParams.epochs is resized")
rc, err = import_edited('        ("channel_std", ctypes.POINTER(ctypes.c_float)),\n    ]\n\n\n_engine_new',
                        '    ]\n\n\n_engine_new')
check(rc != 0 and "LayoutError" in err and "channel_std" in err and "missing" in err,
      "import fails when _NativeBatch lacks its last field")
rc, err = import_edited('("prefetch", ctypes.c_int),', '("prefetch_depth", ctypes.c_int),')
check(rc != 0 and "prefetch_depth" in err and "prefetch" in err,
      "import fails when a field is renamed")
rc, err = import_edited("import ctypes\n", "import ctypes\n")
check(rc == 0, "the unchanged copy imports: " + err[-300:])
sys.exit(1 if failed else 0)
