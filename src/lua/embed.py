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
expand() and passed() to run the same text.

A line "-- wrap <script>.lua as <fn>" (batch.lua) is replaced by that
script's text as Redis runs it, as the body of "local function <fn>(i,
o)" whose KEYS[1] is KEYS[i], other KEYS[j] KEYS[n + j - 1] and ARGV[j]
ARGV[o + j] (wrapped()), so one call can run it for many names. The library
files that only define functions (they name no KEYS or ARGV) are defined
once, before the first such function, and not again in each: a call
makes their functions once, not once per name."""

import os
import re
import sys

INCLUDE = re.compile(r"^\s*--\s*include\s+(\S+)\s*$")
WRAP = re.compile(r"^\s*--\s*wrap\s+(\S+)\s+as\s+(\w+)\s*$")
HOISTED = "\0hoisted\0"
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


def defines_only(path):
    """Whether a library file only defines functions (names no KEYS or
    ARGV): it may be defined once for many names."""
    code = squash(path)
    return (code.startswith("local function ") and
            not re.search(r"\b(KEYS|ARGV)\b", code))


def expand(path, hoisted=None):
    """The script's text as Redis runs it. hoisted: the library files
    defined once before a wrapped script (a list it adds to); their
    include lines are left empty."""
    lib = os.path.join(os.path.dirname(path), "lib")
    out, wraps = [], []
    with open(path) as f:
        for line in f:
            m, w = INCLUDE.match(line), WRAP.match(line)
            if m and hoisted is not None and defines_only(
                    os.path.join(lib, m.group(1))):
                if m.group(1) not in hoisted:
                    hoisted.append(m.group(1))
                out.append("\n")
            elif m:
                out.append(squash(os.path.join(lib, m.group(1))) + "\n")
            elif w:
                wraps.append(w.groups())
                out.append(HOISTED if len(wraps) == 1 else "")
            else:
                out.append(line)
    text = derive("".join(out), keys(path), path)
    if not wraps:
        return text
    hoisted, fns = [], []
    for script, fn in wraps:
        body = expand(os.path.join(os.path.dirname(path), script), hoisted)
        fns.append("local function %s(i, o)\n%send\n" % (fn, wrapped(body)))
    libs = "".join(squash(os.path.join(lib, h)) + "\n" for h in hoisted)
    return text.replace(HOISTED, libs + "".join(fns))


def wrapped(body):
    """A script's text as the body of a batch's function of (i, o): its
    KEYS are call i's lock key, KEYS[i], and then the keys of no name
    every call shares, after the n calls' lock keys; its ARGV[j] is
    ARGV[o + j]. No table is made for a call."""
    body = re.sub(r"KEYS\[(\d+)\]", lambda m: "KEYS[i]" if m.group(1) == "1"
                  else "KEYS[n + %d]" % (int(m.group(1)) - 1), body)
    return re.sub(r"ARGV\[(\d+)\]", r"ARGV[o + \1]", body)


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
