#!/usr/bin/env python3
"""Assemble docs/RESULTS.md from its skeleton.

    assemble_results.py [--skeleton FILE] [--doc FILE] [PART_FILE ...]

The skeleton (docs/results/skeleton.md) holds the document's order: a
section per system, hand-written tables of the papers' claims, and two kinds
of marked blocks:

    <!-- part NAME --> ... <!-- /part NAME -->              rendered by scripts/render_*.py
    <!-- experiment NAME --> ... <!-- /experiment NAME -->  written by `tandem experiment NAME`
                                                            and `tandem compare ... --markdown`

The output keeps every marker, so later commands can replace their blocks in
place. Each block is filled from, in this order:
  - a part file given on the command line (a renderer's output: one or more
    part blocks; a file without markers is the part named by its file stem);
  - the same block in the current document (--doc), so that a partial run
    keeps what it did not regenerate;
  - otherwise a line saying how to generate it.
Blocks of the current document that the skeleton does not place are kept at
the end, under "Other results", and named on stderr: nothing measured is
dropped.
"""
import argparse
import os
import re
import sys

BLOCK = re.compile(r"<!-- (part|experiment) ([A-Za-z0-9_.-]+) -->\n?(.*?)\n?<!-- /\1 \2 -->", re.S)


def blocks(text):
    """{(kind, name): content} of every marked block in `text`."""
    found = {}
    for m in BLOCK.finditer(text):
        key = (m.group(1), m.group(2))
        if key in found:
            sys.exit(f"assemble_results: {m.group(1)} {m.group(2)} is marked twice")
        found[key] = m.group(3).strip("\n")
    return found


def render(kind, name, content):
    return f"<!-- {kind} {name} -->\n{content}\n<!-- /{kind} {name} -->"


def placeholder(kind, name):
    if kind == "experiment":
        return f"*Not generated yet: `tandem experiment {name}` (or its line in `scripts/results.sh`) writes this section.*"
    return f"*Not generated yet: `scripts/results.sh` renders this part ({name}).*"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skeleton", default=os.path.join(here, "..", "docs", "results", "skeleton.md"))
    ap.add_argument("--doc", default=os.path.join(here, "..", "docs", "RESULTS.md"))
    ap.add_argument("parts", nargs="*", help="rendered part files")
    a = ap.parse_args()

    skeleton = open(a.skeleton).read()
    old = blocks(open(a.doc).read()) if os.path.exists(a.doc) else {}
    new = {}
    for path in a.parts:
        text = open(path).read()
        found = blocks(text)
        if not found:
            found = {("part", os.path.splitext(os.path.basename(path))[0]): text.strip("\n")}
        for key, content in found.items():
            if key[0] != "part":
                sys.exit(f"assemble_results: {path}: renderers write parts, not {key[0]} blocks")
            new[key] = content

    placed = set()

    def fill(m):
        key = (m.group(1), m.group(2))
        if key in placed:
            sys.exit(f"assemble_results: the skeleton marks {key[0]} {key[1]} twice")
        placed.add(key)
        content = new.get(key, old.get(key))
        return render(*key, placeholder(*key) if content is None else content)

    out = BLOCK.sub(fill, skeleton).rstrip("\n") + "\n"

    unplaced = [k for k in new if k not in placed]
    if unplaced:
        sys.exit("assemble_results: the skeleton has no place for part(s) "
                 + ", ".join(n for _, n in unplaced) + "; add their markers to " + a.skeleton)
    kept = [k for k in old if k not in placed]
    if kept:
        print("assemble_results: keeping blocks the skeleton does not place, under 'Other results': "
              + ", ".join(f"{k} {n}" for k, n in kept), file=sys.stderr)
        out += "\n## Other results\n\nSections the skeleton (`docs/results/skeleton.md`) does not place yet.\n"
        for k in kept:
            out += "\n" + render(*k, old[k]) + "\n"

    tmp = a.doc + ".tmp"
    with open(tmp, "w") as f:
        f.write(out)
    os.replace(tmp, a.doc)


if __name__ == "__main__":
    main()
