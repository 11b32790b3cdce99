#!/usr/bin/env python3
"""Checks every #include "..." of the tree against docs/architecture.md.

Usage: check_includes.py REPO_ROOT

The table under "## The parts" in docs/architecture.md names each part's
folder and the folders it may include. A file belongs to the part of the
longest folder that holds it; an include names a part the same way. An
include is allowed when it names the file's own part, a part listed in the
file's "may include" column, or a header outside the repository's folders.
Exits 1 listing every include that crosses the rules, or every C++ file that
no part holds; 0 when there is none.
"""

import os
import re
import sys

SOURCE = re.compile(r"\.(h|cc|cu|cpp|hpp)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
FOLDER = re.compile(r"`([^`]+/)`")


def read_parts(doc):
    """Returns {folder: set of folders it may include, or None for any}."""
    parts = {}
    in_section = False
    for line in doc.splitlines():
        if line.startswith("## "):
            in_section = line.strip() == "## The parts"
            continue
        if not in_section or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or cells[0] in ("part", "") or cells[0].startswith("-"):
            continue
        folder = FOLDER.findall(cells[1])
        if len(folder) != 1:
            raise SystemExit(f"architecture.md: row {cells[0]!r} names no one folder")
        allowed = None if cells[4] == "anything" else set(FOLDER.findall(cells[4]))
        parts[folder[0]] = allowed
    if not parts:
        raise SystemExit("architecture.md: no table under '## The parts'")
    return parts


def part_of(path, parts):
    best = None
    for folder in parts:
        if path.startswith(folder) and (best is None or len(folder) > len(best)):
            best = folder
    return best


def main():
    root = os.path.abspath(sys.argv[1])
    with open(os.path.join(root, "docs", "architecture.md")) as f:
        parts = read_parts(f.read())
    top_folders = {folder.split("/")[0] + "/" for folder in parts}
    problems = []
    checked = 0
    for top in sorted(top_folders):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                if not SOURCE.search(name):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                own = part_of(path, parts)
                if own is None:
                    problems.append(f"{path}: in no part of docs/architecture.md")
                    continue
                allowed = parts[own]
                with open(os.path.join(root, path), errors="replace") as f:
                    text = f.read()
                for included in INCLUDE.findall(text):
                    checked += 1
                    if allowed is None:
                        continue
                    if included.split("/")[0] + "/" not in top_folders:
                        continue  # outside the repository's folders
                    target = part_of(included, parts)
                    if target == own or target in allowed:
                        continue
                    problems.append(
                        f"{path} includes {included}: part {own} may include "
                        f"only {', '.join(sorted(allowed))}")
    for problem in problems:
        print(problem)
    print(f"{checked} includes checked against {len(parts)} parts; "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
