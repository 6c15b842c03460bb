#!/usr/bin/env python3
"""The option tables of programs/cli against what is written elsewhere about them.

`pipebench help --options-json` dumps every command's table (name, type, field, defaults,
ranges, help, Python keyword). This script checks, and says what differs:

  1. docs/options.md's reference section is exactly what the tables give
     (`options_check.py --write` rewrites it);
  2. every code block after an `<!-- options: CMD -->` marker in docs/*.md names each option
     of CMD once at least and no other, and a number shown after an option is its default;
  3. every help text with "{}" has a default to show;
  4. the Python functions taking a command's settings (pipebench.infer, pipebench.train) have
     a keyword for each option with one (.py), no keyword the table lacks (but the listed
     Python-only ones), and the C default where the C struct has one;
  5. each option's field offset and size match pb_struct_layout for structs the library
     describes.

Environment: PIPEBENCH_CLI (the pipebench binary); PIPEBENCH_LIBRARY (libpipebench.so) for 4 and 5.
"""
import inspect
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DOC = os.path.join(ROOT, "docs", "options.md")
BEGIN, END = "<!-- options reference: begin -->", "<!-- options reference: end -->"
# keywords of the Python functions that are no command-line option
PY_ONLY = {"infer": {"plot", "notes", "csv_path"}, "train": {"notes"}}

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg)


def tables():
    cli = os.environ.get("PIPEBENCH_CLI", os.path.join(ROOT, "build", "pipebench"))
    out = subprocess.run([cli, "help", "--options-json"], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def md_cell(s):
    return (s or "").replace("|", "\\|")


def render(cmds):
    lines = []
    for c in cmds:
        lines.append(f"### `pipebench {c['command']}`")
        lines.append("")
        extra = []
        if c["params"]:
            extra.append(f"fields of `{c['params']}`")
        if c["python"]:
            extra.append(f"Python: `pipebench.{c['python']}()`")
        if extra:
            lines.append("Sets " + "; ".join(extra) + ".")
            lines.append("")
        lines.append("| option | type | default | accepts | field | Python | help |")
        lines.append("|---|---|---|---|---|---|---|")
        for o in c["options"]:
            name = f"`--{o['name']}" + (f" {o['arg']}`" if o["arg"] else "`")
            accepts = ""
            if o["type"] in ("int", "double"):
                accepts = f"{o['min']:g} to {o['max']:g}" if o["type"] == "double" else \
                    f"{o['min']} to {o['max']}"
            elif o.get("choices"):
                accepts = o["choices"].replace(",", ", ")
            field = f"`{o['field']}`" if o["field"] else ""
            py = f"`{o['python']}`" if o["python"] else ""
            dflt = f"`{o['default']}`" if o["default"] else ""
            lines.append(f"| {name} | {o['type']} | {md_cell(dflt)} | {md_cell(accepts)} | "
                         f"{md_cell(field)} | {py} | {md_cell(o['help'])} |")
        lines.append("")
    return "\n".join(lines)


def check_reference(cmds, write):
    text = open(DOC, encoding="utf-8").read()
    if BEGIN not in text or END not in text:
        fail(f"{DOC}: the markers {BEGIN} and {END} are missing")
        return
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + BEGIN + "\n" + render(cmds) + END + tail
    if new == text:
        print("ok docs/options.md reference")
    elif write:
        open(DOC, "w", encoding="utf-8").write(new)
        print("updated docs/options.md")
    else:
        fail("docs/options.md: the reference section differs from the option tables; "
             "run tests/cli/options_check.py --write (PIPEBENCH_CLI=build/pipebench) and check the diff")


def check_synopses(cmds):
    by_name = {c["command"]: c for c in cmds}
    docs = os.path.join(ROOT, "docs")
    seen = 0
    for fn in sorted(os.listdir(docs)):
        if not fn.endswith(".md") or fn == "options.md":
            continue
        path = os.path.join(docs, fn)
        text = open(path, encoding="utf-8").read()
        for m in re.finditer(r"<!-- options: ([a-z]+) -->\s*```[a-z]*\n(.*?)```", text, re.S):
            seen += 1
            cmd, block = m.group(1), m.group(2)
            if cmd not in by_name:
                fail(f"docs/{fn}: <!-- options: {cmd} --> names no command")
                continue
            opts = {o["name"]: o for o in by_name[cmd]["options"]}
            named = re.findall(r"--([a-z0-9][a-z0-9-]*)(?:[ =]([^\s\[\]|-][^\s\]|]*))?", block)
            names = {n for n, _ in named}
            for n in sorted(names - set(opts)):
                fail(f"docs/{fn}: the {cmd} synopsis names --{n}, which `pipebench {cmd}` "
                     "does not have")
            for n in sorted(set(opts) - names):
                fail(f"docs/{fn}: the {cmd} synopsis lacks --{n}")
            for n, v in named:
                o = opts.get(n)
                if o is None or o["type"] not in ("int", "double") or not o["default"]:
                    continue
                if re.fullmatch(r"-?[0-9.]+", v or "") and float(v) != float(o["default"]):
                    fail(f"docs/{fn}: the {cmd} synopsis shows --{n} {v}; its default is "
                         f"{o['default']}")
    if seen == 0:
        fail("no <!-- options: CMD --> synopsis found in docs/")
    else:
        print(f"ok {seen} synopses in docs/")


def check_help(cmds):
    for c in cmds:
        for o in c["options"]:
            if "{}" in o["help"]:
                fail(f"{c['command']} --{o['name']}: help shows {{}} literally")
            if "(default )" in o["help"] or "default )" in o["help"]:
                fail(f"{c['command']} --{o['name']}: help shows an empty default: {o['help']}")
    print("ok help texts")


def same(py, c_text, kind):
    if kind == "int":
        return isinstance(py, int) and py == int(c_text)
    if kind == "double":
        return isinstance(py, (int, float)) and float(py) == float(c_text)
    return py == c_text


def check_python(cmds):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import pipebench  # noqa: E402  (the import checks the ctypes structs itself)
    for c in cmds:
        if not c["python"]:
            continue
        fn = getattr(pipebench, c["python"])
        sig = inspect.signature(fn).parameters
        mapped = {o["python"]: o for o in c["options"] if o["python"]}
        for kw, o in mapped.items():
            if kw not in sig:
                fail(f"{c['command']} --{o['name']}: pipebench.{c['python']}() has no keyword "
                     f"{kw}")
                continue
            d = sig[kw].default
            if o["c_default"] is None or d is None or d is inspect.Parameter.empty:
                continue
            if isinstance(d, (tuple, list)):
                continue
            if not same(d, o["c_default"], o["type"]):
                fail(f"{c['command']} --{o['name']}: pipebench.{c['python']}({kw}={d!r}) but "
                     f"the C default ({c['params']}.{o['field']}) is {o['c_default']}")
        extra = set(sig) - set(mapped) - PY_ONLY.get(c["python"], set())
        for kw in sorted(extra):
            fail(f"pipebench.{c['python']}({kw}=...) matches no option of `pipebench "
                 f"{c['command']}` (add .py to its table line, or to PY_ONLY here)")
    print("ok Python keywords")
    return pipebench


def check_offsets(cmds, pipebench):
    import ctypes
    fl = ctypes.POINTER(pipebench._FieldLayout)
    fn = pipebench._lib.pb_struct_layout
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_char_p, ctypes.POINTER(fl), ctypes.POINTER(ctypes.c_size_t)]
    n_checked = 0
    for c in cmds:
        if not c["params"]:
            continue
        fields = fl()
        n = ctypes.c_size_t()
        if fn(c["params"].encode(), ctypes.byref(fields), ctypes.byref(n)) == 0:
            continue
        layout = {fields[i].name.decode(): (fields[i].offset, fields[i].size)
                  for i in range(n.value)}
        for o in c["options"]:
            if o["field"] in layout:
                n_checked += 1
                if layout[o["field"]] != (o["offset"], o["size"]):
                    fail(f"{c['command']} --{o['name']}: field {o['field']} at "
                         f"{o['offset']}/{o['size']} in the table, {layout[o['field']]} in "
                         "pb_struct_layout")
    print(f"ok {n_checked} field offsets against pb_struct_layout")


def main():
    write = "--write" in sys.argv[1:]
    cmds = tables()
    check_reference(cmds, write)
    check_synopses(cmds)
    check_help(cmds)
    if os.environ.get("PIPEBENCH_LIBRARY"):
        check_offsets(cmds, check_python(cmds))
    else:
        fail("PIPEBENCH_LIBRARY is not set: the Python checks did not run")
    if failures:
        print(f"{len(failures)} problem(s)")
        return 1
    print("all option checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
