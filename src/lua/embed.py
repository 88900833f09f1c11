#!/usr/bin/env python3
"""Embed the Lua scripts of src/lua/ in a C header, at build time.

    embed.py OUT.h SCRIPT.lua...

Keys. Each script declares its keys once, in its opening comment, on one
line: "-- KEYS: lock fence waiters" (lock is <prefix>{<name>}; a word /w
is a key of no name, made by lockdb_script.c's lockdb_key_of_no_name;
any other word w is <prefix>{<name>}:w), and names them KEYS[1],
KEYS[2], ... in that order. Every key is passed: a script touches no key
it does not declare, so Redis Cluster can refuse a call whose keys are
not all served where it is sent (TRYAGAIN, ASK, MOVED) before the script
runs, rather than half way through it.

Flags. The first line of every script is "#!lua" or "#!lua flags=..."
(Redis 7's script flags: allow-oom lets it run above maxmemory, no-writes
promises it writes nothing); the script's header says why it has the
flags it has.

Names. Below its comment a script names each key and argument, one a
line, "local queueKey = KEYS[3]" (every key of its KEYS line, in order)
and "local token = ARGV[1]" (ARGV[1] to ARGV[n], each once). These are
names, not locals: each declaration line is left empty and each use of
the name in code (not in a string or a comment, in the script or the
library text it includes) is written as its KEYS[i] or ARGV[j], so the
text Redis runs reads a key or an argument where it uses it and makes
nothing at the top of a call. A name may not be assigned or declared
again, and no code but a declaration writes KEYS[ or ARGV[. Likewise a
library file's line "local NAME = '<string>'" or "local NAME = <digits>"
(a capitalized name) declares a constant, written as its value wherever
code uses it: a pattern or a number is named once and costs nothing.

Includes. A line "-- include <file>" is replaced by lib/<file> with its
comment lines dropped and its code joined onto that one line, so every
line of a script is the line of its .lua file: Redis's "user_script:N"
in an error is line N of the file.

Output. For each script x.lua the header defines LUA_X_FILE, LUA_X_BODY,
LUA_X_NKEYS, LUA_X_KEYS (an initializer of its keys' suffixes, in order:
"" for the lock key, ":w" and "/w"), LUA_X_NARGS and, for each argument
named argName, LUA_X_ARG_NAME (its index from 0, as the C side fills
it). tests/e2e/test_scripts.py imports expand() and keys() to run the
same text.

Batches. A line "-- wrap <script>.lua as <fn>" (batch.lua) is replaced
by that script's text as Redis runs it (without its first line), as the
body of "local function <fn>(keys_at, args_at, gate)" whose KEYS[j] is
KEYS[keys_at + j] and ARGV[j] ARGV[args_at + j] (wrapped()), so one call
can run it for many names, each with its own keys; gate is the
incarnation gate the batch hands it. A batch carries the calls of one
script and takes that script's flags: for each wrapped script x the
header defines LUA_BATCH_AS_X_BODY, the batch's text with x's first
line. The library files that only define functions (they name no KEYS or
ARGV) are defined once, before the first such function, and not again in
each: a call makes their functions once, not once per name."""

import os
import re
import sys

INCLUDE = re.compile(r"^\s*--\s*include\s+(\S+)\s*$")
WRAP = re.compile(r"^\s*--\s*wrap\s+(\S+)\s+as\s+(\w+)\s*$")
NAME = re.compile(r"^local (\w+) = ((KEYS|ARGV)\[(\d+)\])\s*(--.*)?$")
CONST = re.compile(r"^local ([A-Z][A-Z0-9_]*) = ('[^'\\]*'|\d+)\s*(--.*)?$")
HOISTED = "\0hoisted\0"
AT = ("keys_at", "args_at")  # a wrapped call's offsets (wrapped())
KEYS = re.compile(r"^--\s*KEYS:\s*(.*)$")
SHEBANG = re.compile(r"^#!lua( flags=[a-z-]+(,[a-z-]+)*)?$")
LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")


def code_parts(line):
    """line cut into (is_code, text) parts: strings and a comment are
    not code."""
    parts, i, start, n = [], 0, 0, len(line)
    while i < n:
        c = line[i]
        if c in "'\"":
            j = i + 1
            while j < n and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            parts += [(True, line[start:i]), (False, line[i:j + 1])]
            i = start = j + 1
        elif line.startswith("--", i):
            parts += [(True, line[start:i]), (False, line[i:])]
            return parts
        else:
            i += 1
    return parts + [(True, line[start:])]


def in_code(text, fn):
    """text with fn applied to its code alone."""
    return "\n".join("".join(fn(t) if code else t
                             for code, t in code_parts(line))
                     for line in text.split("\n"))


def code_of(text):
    out = []
    in_code(text, lambda t: out.append(t) or t)
    return " ".join(out)


def constants():
    """NAME -> string literal, from every library file."""
    out = {}
    for f in sorted(os.listdir(LIB)):
        with open(os.path.join(LIB, f)) as fh:
            for line in fh:
                m = CONST.match(line)
                if m:
                    if m.group(1) in out:
                        sys.exit("lib/%s: %s declared twice" % (f, m.group(1)))
                    out[m.group(1)] = m.group(2)
    return out


def squash(path):
    """A library file as one line of code: no comments, no constants, no
    line breaks."""
    code = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("--") or CONST.match(line):
                continue
            if any(not c and t.startswith("--") for c, t in code_parts(line)):
                sys.exit("%s: a comment after code cannot be joined" % path)
            code.append(line)
    return " ".join(code)


def defines_only(path):
    """Whether a library file only defines functions (names no KEYS or
    ARGV): it may be defined once for many names."""
    code = squash(path)
    return (code == "" or code.startswith("local function ")) and \
        not re.search(r"\b(KEYS|ARGV)\b", code)


def substitute(text, names, path):
    """text with each name written as what it stands for (code only)."""
    if not names:
        return text
    code = code_of(text)
    for n in names:
        again = (r"\blocal\s+(function\s+)?([\w\s,]*\b)?%s\b|"
                 r"\bfunction\b[^(]*\([^)]*\b%s\b[^)]*\)|"
                 r"\bfor\s+([\w\s,]*\b)?%s\b|"
                 r"(?<![\w.:])%s\s*=(?!=)") % (n, n, n, n)
        if re.search(again, code):
            sys.exit("%s: %s is declared or assigned again" % (path, n))
    word = re.compile(r"(?<![\w.:'\"])(%s)\b" % "|".join(
        sorted(names, key=len, reverse=True)))
    return in_code(text, lambda t: word.sub(lambda m: names[m.group(1)], t))


def declared(path):
    """The script's names (name -> "KEYS[i]" or "ARGV[j]") and its
    arguments' names in order."""
    names, args, ks = {}, {}, keys(path)
    with open(path) as f:
        lines = f.read().split("\n")
    for no, line in enumerate(lines, 1):
        m = NAME.match(line)
        if m:
            if m.group(1) in names:
                sys.exit("%s:%d: %s named twice" % (path, no, m.group(1)))
            names[m.group(1)] = m.group(2)
            if m.group(3) == "ARGV":
                args[int(m.group(4))] = m.group(1)
    keyed = sorted(int(v[5:-1]) for v in names.values()
                   if v.startswith("KEYS"))
    if keyed != list(range(1, len(ks) + 1)):
        sys.exit("%s: name each of the %d keys once, in order" % (
            path, len(ks)))
    if sorted(args) != list(range(1, len(args) + 1)):
        sys.exit("%s: name ARGV[1] to ARGV[n], each once" % path)
    return names, [args[j] for j in sorted(args)]


def expand(path, hoisted=None, carry=None):
    """The script's text as Redis runs it. hoisted: the library files
    defined once before a wrapped script (a list it adds to); their
    include lines are left empty, and so is its first line (its flags).
    carry: for a batch, the wrapped script whose first line (flags) it
    takes."""
    lib = os.path.join(os.path.dirname(path), "lib")
    out, wraps = [], []
    flags(path)
    with open(path) as f:
        for no, line in enumerate(f):
            m, w = INCLUDE.match(line), WRAP.match(line)
            if no == 0 and (hoisted is not None or carry is not None):
                out.append("\n" if carry is None else
                           flags(os.path.join(os.path.dirname(path), carry))
                           + "\n")
            elif m and hoisted is not None and defines_only(
                    os.path.join(lib, m.group(1))):
                if m.group(1) not in hoisted:
                    hoisted.append(m.group(1))
                out.append("\n")
            elif m:
                out.append(squash(os.path.join(lib, m.group(1))) + "\n")
            elif w:
                wraps.append(w.groups())
                out.append(HOISTED if len(wraps) == 1 else "")
            elif NAME.match(line):
                out.append("\n")
            else:
                out.append(line)
    names = dict(declared(path)[0], **constants())
    text = substitute("".join(out), names, path)
    if re.search(r"\b(KEYS|ARGV)\s*\[", code_of("".join(
            l for l in out if l is not HOISTED))):
        sys.exit("%s: KEYS[ or ARGV[ outside the names at its top" % path)
    check_keys(text, keys(path), path)
    if not wraps:
        return text
    hoisted, fns = [], []
    for script, fn in wraps:
        body = expand(os.path.join(os.path.dirname(path), script), hoisted)
        fns.append("local function %s(%s, %s, gate)\n%send\n" % (
            fn, AT[0], AT[1], wrapped(body, script)))
    libs = "".join(substitute(squash(os.path.join(lib, h)), constants(), h)
                   + "\n" for h in hoisted if squash(os.path.join(lib, h)))
    return text.replace(HOISTED, libs + "".join(fns))


def wrapped(body, path):
    """A script's text as the body of a batch's function of (keys_at,
    args_at): its KEYS[j] is KEYS[keys_at + j], its call's keys being the
    batch's after the keys_at of the calls before it; its ARGV[j] is
    ARGV[args_at + j]. No table is made for a call. The script may not
    use those two names (a local of its own would stand for them)."""
    if re.search(r"\b(%s|%s)\b" % AT, code_of(body)):
        sys.exit("%s: %s and %s are a batch's names" % ((path,) + AT))
    body = re.sub(r"KEYS\[(\d+)\]", r"KEYS[%s + \1]" % AT[0], body)
    return re.sub(r"ARGV\[(\d+)\]", r"ARGV[%s + \1]" % AT[1], body)


def check_keys(text, declared, path):
    """Every KEYS[i] the text reads is a key its KEYS line declares."""
    for m in re.finditer(r"KEYS\[(\d+)\]", text):
        if not 1 <= int(m.group(1)) <= len(declared):
            sys.exit("%s: KEYS[%s] is not declared" % (path, m.group(1)))


def keys(path):
    """The key suffixes the script's KEYS line declares, in order: each
    is passed."""
    with open(path) as f:
        for line in f:
            m = KEYS.match(line.strip())
            if m:
                return ["" if w == "lock" else w if w.startswith("/")
                        else ":" + w for w in m.group(1).split()]
    sys.exit("%s: no '-- KEYS:' line" % path)


def flags(path):
    """The script's first line: "#!lua", with its flags if any."""
    with open(path) as f:
        first = f.readline().rstrip("\n")
    if not SHEBANG.match(first):
        sys.exit("%s: the first line is not '#!lua [flags=...]'" % path)
    return first


def wraps(path):
    """The scripts a batch wraps, in order."""
    with open(path) as f:
        return [m.group(1) for m in map(WRAP.match, f) if m]


def c_string(text):
    lines = text.splitlines(True)
    esc = lambda s: s.replace("\\", "\\\\").replace('"', '\\"').replace(
        "\n", "\\n").replace("\t", "\\t")
    return " \\\n".join('\t"%s"' % esc(l) for l in lines)


def c_name(name):
    """argName as ARG_NAME."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).upper()


def main():
    out, scripts = sys.argv[1], sys.argv[2:]
    text = ["/* Made by src/lua/embed.py from src/lua/<script>.lua: do not edit. */",
            "#ifndef LB_LUA_SCRIPTS_H", "#define LB_LUA_SCRIPTS_H", ""]
    for path in sorted(scripts):
        base = os.path.basename(path)
        name = re.sub(r"\W", "_", base[:-4]).upper()
        ks, args = keys(path), declared(path)[1]
        text += ['#define LUA_%s_FILE "%s"' % (name, base),
                 "#define LUA_%s_NKEYS %d" % (name, len(ks)),
                 "#define LUA_%s_KEYS { %s }" % (
                     name, ", ".join('"%s"' % k for k in ks)),
                 "#define LUA_%s_NARGS %d" % (name, len(args))]
        text += ["#define LUA_%s_ARG_%s %d" % (name, c_name(a), j)
                 for j, a in enumerate(args)]
        if not wraps(path):
            text += ["#define LUA_%s_BODY \\" % name,
                     c_string(expand(path)), ""]
        for w in wraps(path):
            text += ["#define LUA_%s_AS_%s_BODY \\" % (
                name, re.sub(r"\W", "_", w[:-4]).upper()),
                c_string(expand(path, carry=w)), ""]
    text.append("#endif")
    with open(out, "w") as f:
        f.write("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
