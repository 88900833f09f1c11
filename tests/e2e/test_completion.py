"""tools/lockctl.bash-completion, sourced in a plain bash: what it offers
for a few command lines, and that every option it offers is one lockctl
takes (so the two cannot drift apart)."""

import os
import subprocess
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
COMPLETION = os.path.join(ROOT, "tools", "lockctl.bash-completion")
LOCKCTL = os.environ.get("LOCKCTL", "build/tools/lockctl")

SUBCOMMANDS = ["acquire", "fill", "info", "ping", "release", "revoke", "run",
               "status", "who"]

# Sets COMP_WORDS from "$@" (the last word is the one being completed),
# calls the completion function complete(1) registered for lockctl, and
# prints what it offers, one per line.
DRIVER = r"""
source "$COMPLETION" || exit 1
COMP_WORDS=("$@")
COMP_CWORD=$(($# - 1))
COMP_LINE="$*"
COMP_POINT=${#COMP_LINE}
fn=$(complete -p lockctl | sed -n 's/.*-F \([^ ]*\) .*/\1/p')
"$fn" lockctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
printf '%s\n' "${COMPREPLY[@]}"
"""


def complete(*words):
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", DRIVER,
                        "bash", "lockctl"] + list(words),
                       env=dict(os.environ, COMPLETION=COMPLETION),
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    assert p.stderr == "", p.stderr
    return sorted(w for w in p.stdout.split("\n") if w)


class Completion(unittest.TestCase):
    def test_subcommands(self):
        self.assertEqual(complete(""), SUBCOMMANDS)
        self.assertEqual(complete("r"), ["release", "revoke", "run"])
        # After the global options and their values too.
        self.assertEqual(complete("-s", "db:7878", "-a", "/etc/s", "fi"),
                         ["fill"])
        self.assertEqual(complete("-"), ["--help", "--version", "-C", "-K",
                                         "-T", "-V", "-a", "-h", "-s", "-u"])

    def test_options_of_a_subcommand(self):
        self.assertEqual(complete("run", "--w"), ["--wait"])
        self.assertEqual(complete("run", "-w", "5", "--c"),
                         ["--conflict-exit-code"])
        self.assertIn("--keep", complete("acquire", "x", "--"))
        self.assertNotIn("--keep", complete("run", "--"))
        self.assertEqual(complete("release", "x", "--"), ["--token"])
        self.assertEqual(complete("status", "-"), [])
        self.assertEqual(complete("fill", "-"),
                         sorted(["-w", "--wait", "-n", "--try", "-E",
                                 "--conflict-exit-code", "-q", "--quiet",
                                 "--ttl", "--grace", "--"]))

    def test_values_and_command(self):
        # A value is the user's to type: nothing is offered.
        self.assertEqual(complete("run", "-w", ""), [])
        self.assertEqual(complete("run", "--ttl", ""), [])
        # COMMAND after "--", or after NAME: command names.
        self.assertIn("bash", complete("run", "job", "--", "bas"))
        self.assertIn("bash", complete("run", "-n", "job", "bas"))
        self.assertIn("bash", complete("fill", "-w", "1", "job", "--",
                                       "bas"))

    def test_every_offered_option_is_lockctls(self):
        dead = dict(os.environ, LOCKBROKER_ADDR="127.0.0.1:1")
        for sub in SUBCOMMANDS:
            for opt in complete(sub, "-"):
                if opt == "--":
                    continue
                with self.subTest(sub=sub, opt=opt):
                    p = subprocess.run([LOCKCTL, sub, opt, "x"], env=dead,
                                       capture_output=True, text=True,
                                       timeout=10)
                    self.assertNotIn("unknown option", p.stderr)
            with self.subTest(sub=sub):
                p = subprocess.run([LOCKCTL, "-h"], capture_output=True,
                                   text=True, timeout=10)
                self.assertRegex(p.stdout, r"(?m)^  %s\b" % sub)


if __name__ == "__main__":
    unittest.main(verbosity=2)
