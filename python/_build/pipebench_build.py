"""A PEP 517 backend for the pipebench package, standard library only: the wheel holds
pipebench/*.py and its dist-info. pyproject.toml's [project] gives name and version."""

import base64
import hashlib
import os
import tomllib
import zipfile

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _project():
    with open(os.path.join(_HERE, "pyproject.toml"), "rb") as f:
        p = tomllib.load(f)["project"]
    return (p["name"], p["version"], p.get("description", ""), p.get("requires-python", ""),
            p.get("dependencies", []))


def _digest(data):
    d = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "sha256=" + d


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, summary, requires, deps = _project()
    info = f"{name}-{version}.dist-info"
    files = []
    pkg = os.path.join(_HERE, name)
    for fn in sorted(os.listdir(pkg)):
        if fn.endswith(".py"):
            with open(os.path.join(pkg, fn), "rb") as f:
                files.append((f"{name}/{fn}", f.read()))
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n"
    if requires:
        meta += f"Requires-Python: {requires}\n"
    for d in deps:  # pip installs these with the package (numpy: needed at import)
        meta += f"Requires-Dist: {d}\n"
    files.append((f"{info}/METADATA", meta.encode()))
    files.append((f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: pipebench_build\n"
                  b"Root-Is-Purelib: true\nTag: py3-none-any\n"))
    record = "".join(f"{p},{_digest(d)},{len(d)}\n" for p, d in files) + f"{info}/RECORD,,\n"
    files.append((f"{info}/RECORD", record.encode()))
    wheel = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in files:
            z.writestr(p, d)
    return wheel
