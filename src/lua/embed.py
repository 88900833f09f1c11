#!/usr/bin/env python3
"""Embed the Lua scripts of src/lua/ in a C header, at build time.

    embed.py OUT.h SCRIPT.lua...

Each script declares its keys and arguments in its opening comment, one
line each: "-- KEYS: lock fence waiters" (lock is <prefix>{<name>}; a word
/w is <prefix>w, a key of no name; any other word w is <prefix>{<name>}:w)
and "-- ARGV: token ttl" (or "-- ARGV: as x.lua's": x's). Its body names
them as locals at its top, one a line, "local fence_key = KEYS[2]" (the
key of word w is w_key, without the /) and "local ttl = ARGV[2]", and
nowhere else says KEYS[ or ARGV[ (check_names()). Only the lock key and
the keys of no name are passed (passed()): the text Redis runs names every
other key as the lock key and its suffix, "(KEYS[1] .. ':w')", in the same
hash slot, so a call does not send the name a dozen times. A line "--
include <file>" is replaced by lib/<file> with its comment lines dropped
and its code joined onto that one line, so every line of a script is the
line of its .lua file: Redis's "user_script:N" in an error is line N of
the file. For each script x.lua the header defines LUA_X_FILE, LUA_X_BODY,
LUA_X_NKEYS, LUA_X_KEYS (an initializer of the passed keys' suffixes, in
order), LUA_X_ARGC and, for each argument a, LUA_X_ARG_A, its index in
ARGV from 0: lockdb.c fills the arguments by name. No Lua pattern (a
string with % ^ or $) or number above 1000 is written twice in the
scripts and lib/ (check_once()): each lives in one helper or constant.
tests/e2e/test_scripts.py imports expand(), passed() and the checks.

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
ARGV = re.compile(r"^--\s*ARGV:\s*(.*)$")
NAMED = re.compile(r"^local (\w+) = .*\b(KEYS|ARGV)\[(\d+)\]")


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
    """Whether a library file only defines functions (and the tables they
    keep, "local x = {}") and names no KEYS or ARGV: it may be defined
    once for many names."""
    with open(path) as f:
        top = [l.rstrip() for l in f if l[:1] not in ("", " ", "\n", "-")]
    return (all(re.match(r"(local function \w+\(|local \w+ = \{\}$|end$)",
                         l) for l in top) and
            not re.search(r"\b(KEYS|ARGV)\b", squash(path)))


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


def argv(path):
    """The argument names the script's ARGV line declares, in order."""
    with open(path) as f:
        for line in f:
            m = ARGV.match(line.strip())
            if m:
                w = m.group(1).split()
                if len(w) == 2 and w[0] == "as" and w[1].endswith(".lua's"):
                    return argv(os.path.join(os.path.dirname(path),
                                             w[1][:-2]))
                return w
    sys.exit("%s: no '-- ARGV:' line" % path)


def code_lines(path):
    """(line number, code) of each line of the script's body that is not
    blank or a comment (its header and trailing comments dropped)."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            code = line.split("--", 1)[0].rstrip()
            if code.strip() and not code.startswith("#!"):
                out.append((n, code))
    return out


def check_names(path):
    """Every key and argument the script uses is named once, as a local
    at the top of its body (before any other code), by its KEYS or ARGV
    word; nothing else in it says KEYS[ or ARGV[. A list of what is
    wrong, empty if nothing."""
    words = {"KEYS": [k.lstrip("/") + "_key" for k in
                      [w for w in open(path).read().split("\n")
                       if KEYS.match(w)][0].split()[2:]],
             "ARGV": argv(path)}
    bad, top = [], True
    for n, code in code_lines(path):
        m = NAMED.match(code)
        if m and top:
            name, table, i = m.group(1), m.group(2), int(m.group(3))
            want = words[table][i - 1] if i <= len(words[table]) else None
            if name != want:
                bad.append("%s:%d: %s[%d] is %s, named %s" % (
                    path, n, table, i, want, name))
            continue
        if re.match(r"local \w+ = .*\b(KEYS|ARGV)\b", code) and top:
            continue  # batch.lua's ARGV, a list of calls
        top = False
        if re.search(r"\b(KEYS|ARGV)\[", code):
            bad.append("%s:%d: KEYS[ or ARGV[ outside the named locals" %
                       (path, n))
    return bad


def check_once(paths):
    """No Lua pattern (a string literal with % ^ or $) or number above 1000
    is written in the code of two places of paths: a list of those that
    are, empty if none."""
    seen = {}
    for path in paths:
        for n, code in code_lines(path):
            for lit in re.findall(r"'[^']*'|\"[^\"]*\"", code):
                if re.search(r"[%^$]", lit):
                    seen.setdefault(lit, []).append("%s:%d" % (path, n))
            code = re.sub(r"'[^']*'|\"[^\"]*\"", "", code)
            for num in re.findall(r"\b\d+\b", code):
                if int(num) > 1000:
                    seen.setdefault(num, []).append("%s:%d" % (path, n))
    return ["%s written %d times: %s" % (k, len(v), " ".join(v))
            for k, v in sorted(seen.items()) if len(v) > 1]


def c_string(text):
    lines = text.splitlines(True)
    esc = lambda s: s.replace("\\", "\\\\").replace('"', '\\"').replace(
        "\n", "\\n").replace("\t", "\\t")
    return " \\\n".join('\t"%s"' % esc(l) for l in lines)


def main():
    out, scripts = sys.argv[1], sys.argv[2:]
    lib = os.path.join(os.path.dirname(scripts[0]), "lib")
    bad = check_once(scripts + sorted(
        os.path.join(lib, f) for f in os.listdir(lib) if f.endswith(".lua")))
    for path in scripts:
        bad += check_names(path)
    if bad:
        sys.exit("\n".join(bad))
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
                 "#define LUA_%s_ARGC %d" % (name, len(argv(path)))]
        text += ["#define LUA_%s_ARG_%s %d" % (name, a.upper(), i)
                 for i, a in enumerate(argv(path))]
        text += ["#define LUA_%s_BODY \\" % name,
                 c_string(expand(path)), ""]
    text.append("#endif")
    with open(out, "w") as f:
        f.write("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
