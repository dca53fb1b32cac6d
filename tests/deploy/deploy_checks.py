"""What the deploy tests share: the options a binary really has (from its
--help), and the binaries and the build directory CTest names.

Reading --help instead of a list kept here means a flag added to a binary
(or renamed) is known to these tests without touching them.
"""

import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))

from cluster import binary  # noqa: E402  (tests/e2e/cluster.py: TRAINSUPD, TRAINSUP_AGENT, ...)

# An option line of CLI11's help: "  --listen HOST:PORT=...", "  -v,--verbose ...".
_OPTION_LINE = re.compile(r"^\s+(?:-\w,)?(--[a-z0-9][a-z0-9-]*)")


def help_text(argv):
    """The --help output of `argv` (a binary and its subcommand, if any)."""
    result = subprocess.run(list(argv) + ["--help"], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} --help exited {result.returncode}: {result.stderr}")
    return result.stdout


def help_flags(argv):
    """The long options `argv --help` lists, e.g. {"--listen", "--state", ...}."""
    flags = set()
    for line in help_text(argv).splitlines():
        m = _OPTION_LINE.match(line)
        if m:
            flags.add(m.group(1))
    if not flags:
        raise RuntimeError(f"no options found in {' '.join(argv)} --help")
    return flags


def long_flags(args):
    """The long options among command-line words: "--state" of "--state" and
    of "--state=/x"; everything after a bare "--" belongs to another command."""
    flags = []
    for word in args:
        if word == "--":
            break
        if word.startswith("--"):
            flags.append(word.split("=", 1)[0])
    return flags
