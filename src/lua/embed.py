#!/usr/bin/env python3
"""Embed the Lua scripts of src/lua/ in a C header, at build time.

    embed.py OUT.h SCRIPT.lua...

Each script declares its keys once, in its opening comment, on one line:
"-- KEYS: lock fence waiters" (lock is <prefix>{<name>}; a word /w is
<prefix>w, a key of no name; any other word w is <prefix>{<name>}:w), and
names them KEYS[1], KEYS[2], ... in that order. Only the lock key and the
keys of no name are passed (passed()): the text Redis runs names every
other key as the lock key and its suffix, "(KEYS[1] .. ':w')", in the
same hash slot, so a call does not send the name a dozen times (issue
16). A line "-- include <file>" is replaced by lib/<file> with its comment
lines dropped and its code joined onto that one line, so every line of a
script is the line of its .lua file: Redis's "user_script:N" in an error
is line N of the file. For each script x.lua the header defines
LUA_X_FILE, LUA_X_BODY, LUA_X_NKEYS and LUA_X_KEYS (an initializer of the
passed keys' suffixes, in order). tests/e2e/test_scripts.py imports
expand() and passed() to run the same text."""

import os
import re
import sys

INCLUDE = re.compile(r"^\s*--\s*include\s+(\S+)\s*$")
KEYS = re.compile(r"^--\s*KEYS:\s*(.*)$")


def squash(path):
    """A library file as one line of code: no comments, no line breaks."""
    code = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("--"):
                continue
            if "--" in line:
                sys.exit("%s: a comment after code cannot be joined" % path)
            code.append(line)
    return " ".join(code)


def expand(path):
    """The script's text as Redis runs it."""
    lib = os.path.join(os.path.dirname(path), "lib")
    out = []
    with open(path) as f:
        for line in f:
            m = INCLUDE.match(line)
            out.append(squash(os.path.join(lib, m.group(1))) + "\n"
                       if m else line)
    return derive("".join(out), keys(path), path)


def derive(text, declared, path):
    """text with each KEYS[i] of a name's key other than the lock key
    written as the lock key and its suffix, and the passed keys
    renumbered."""
    given = passed_of(declared)
    if len(given) < len(declared) and (not given or given[0] != ""):
        sys.exit("%s: a name's keys need the lock key first" % path)

    def one(m):
        i = int(m.group(1))
        if not 1 <= i <= len(declared):
            sys.exit("%s: KEYS[%d] is not declared" % (path, i))
        k = declared[i - 1]
        if k in given:
            return "KEYS[%d]" % (given.index(k) + 1)
        return "(KEYS[1] .. '%s')" % k
    return re.sub(r"KEYS\[(\d+)\]", one, text)


def passed_of(declared):
    return [k for k in declared if k == "" or k.startswith("/")]


def passed(path):
    """The key suffixes the broker passes, in order: the lock key ("")
    and the keys of no name ("/w")."""
    return passed_of(keys(path))


def keys(path):
    """The key suffixes the script's KEYS line declares, in order."""
    with open(path) as f:
        for line in f:
            m = KEYS.match(line.strip())
            if m:
                return ["" if w == "lock" else w if w.startswith("/")
                        else ":" + w for w in m.group(1).split()]
    sys.exit("%s: no '-- KEYS:' line" % path)


def c_string(text):
    lines = text.splitlines(True)
    esc = lambda s: s.replace("\\", "\\\\").replace('"', '\\"').replace(
        "\n", "\\n").replace("\t", "\\t")
    return " \\\n".join('\t"%s"' % esc(l) for l in lines)


def main():
    out, scripts = sys.argv[1], sys.argv[2:]
    text = ["/* Made by src/lua/embed.py from src/lua/<script>.lua: do not edit. */",
            "#ifndef LB_LUA_SCRIPTS_H", "#define LB_LUA_SCRIPTS_H", ""]
    for path in sorted(scripts):
        base = os.path.basename(path)
        name = re.sub(r"\W", "_", base[:-4]).upper()
        ks = passed(path)
        text += ['#define LUA_%s_FILE "%s"' % (name, base),
                 "#define LUA_%s_NKEYS %d" % (name, len(ks)),
                 "#define LUA_%s_KEYS { %s }" % (
                     name, ", ".join('"%s"' % k for k in ks)),
                 "#define LUA_%s_BODY \\" % name,
                 c_string(expand(path)), ""]
    text.append("#endif")
    with open(out, "w") as f:
        f.write("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
