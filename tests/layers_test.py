#!/usr/bin/env python3
"""Every #include of src/ keeps to the layering that CMakeLists.txt declares.

Each folder of src/ is one library, `rankcheck_layer(NAME DEPS ...)` in
CMakeLists.txt; a file in folder A may include a header of folder B only when A
links B, directly or through the layers it links. Includes are all of one style,
"folder/file.h" from src/, and every one names a file that exists.
Run: python3 tests/layers_test.py (exit 1 with the offending lines).
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
SRC = os.path.join(ROOT, "src")


def layers():
    text = open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8").read()
    deps = {}
    for m in re.finditer(r"rankcheck_layer\((\w+)([^)]*)\)", text):
        name, args = m.group(1), m.group(2)
        words = args.split()
        d = set()
        if "DEPS" in words:
            for w in words[words.index("DEPS") + 1:]:
                if w in ("SOURCES",):
                    break
                if w.startswith("rankcheck_"):
                    d.add(w[len("rankcheck_"):])
        deps.setdefault(name, set()).update(d)
    return deps


def closure(deps):
    full = {}

    def visit(n, stack):
        if n in full:
            return full[n]
        if n in stack:
            raise SystemExit(f"a cycle in CMakeLists.txt's layers: {' -> '.join(stack + [n])}")
        out = set()
        for d in deps.get(n, ()):
            out |= {d} | visit(d, stack + [n])
        full[n] = out
        return out

    for n in deps:
        visit(n, [])
    return full


def main():
    deps = layers()
    reach = closure(deps)
    problems = []
    inc = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]')
    for dirpath, _, names in os.walk(SRC):
        for n in sorted(names):
            if not n.endswith((".cc", ".h", ".h.in")):
                continue
            path = os.path.join(dirpath, n)
            rel = os.path.relpath(path, SRC)
            folder = rel.split(os.sep)[0] if os.sep in rel else None
            for i, line in enumerate(open(path, encoding="utf-8"), 1):
                m = inc.match(line)
                if not m:
                    continue
                delim, name = m.groups()
                where = f"src/{rel}:{i}"
                if delim == "<":
                    if name.startswith("rankcheck/"):
                        problems.append(f"{where}: <{name}>: include \"folder/file.h\" from src/")
                    continue
                target = name.split("/")[0] if "/" in name else None
                if target is None or target not in deps:
                    problems.append(f'{where}: "{name}": not of the form "folder/file.h" of a layer')
                    continue
                exists = os.path.exists(os.path.join(SRC, name)) or \
                    os.path.exists(os.path.join(SRC, name + ".in"))
                if not exists:
                    problems.append(f'{where}: "{name}" does not exist')
                if folder is None:  # src/main.cc and the bootstraps: the top, may use any layer
                    continue
                if folder not in deps:
                    problems.append(f"{where}: src/{folder}/ is not a layer in CMakeLists.txt")
                    continue
                if target != folder and target not in reach[folder]:
                    problems.append(f'{where}: "{name}": {folder}/ does not link {target}/ '
                                    f"(it links {', '.join(sorted(reach[folder])) or 'nothing'})")
    for p in problems:
        print(p)
    print(f"{len(problems)} include(s) outside the layering" if problems else
          f"layers: {len(deps)} folders, every include within the layering")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
