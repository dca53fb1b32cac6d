"""docs/cli.md names every verb `trainsupctl --help` lists, and every column
each table prints (the header lines the binaries' own tables use)."""

import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from cluster import REPO, binary  # noqa: E402

CTL = binary("TRAINSUPCTL", "cli/trainsupctl")


def doc():
    with open(os.path.join(REPO, "docs", "cli.md")) as f:
        return f.read()


def verbs():
    """The subcommands `trainsupctl --help` lists."""
    out = subprocess.run([CTL, "--help"], capture_output=True, text=True, timeout=30).stdout
    listed = out[out.index("Subcommands:"):]
    return re.findall(r"(?m)^  ([a-z][a-z-]*)\s", listed)


class CliDoc(unittest.TestCase):
    def test_every_verb_has_its_section(self):
        found = verbs()
        self.assertGreaterEqual(len(found), 13, found)
        sections = re.findall(r"(?m)^### ([a-z][a-z-]*)", doc())
        self.assertEqual(sorted(found), sorted(sections))

    def test_every_verb_lists_its_exit_codes(self):
        sections = {part.split()[0]: part for part in doc().split("\n### ")[1:]}
        for verb in verbs():
            with self.subTest(verb=verb):
                self.assertIn("Codes:", sections[verb])

    def test_every_event_kind_is_listed(self):
        """The kinds `events --kind` accepts, as its error names them."""
        err = subprocess.run([CTL, "events", "--kind", "no-such-kind"], capture_output=True,
                             text=True, timeout=30).stderr
        kinds = err[err.index("the kinds: ") + len("the kinds: "):].splitlines()[0].split(", ")
        self.assertGreater(len(kinds), 30, err)
        section = doc().split("\n### events")[1].split("\n### ")[0]
        listed = section[section.index("Kinds"):section.index("Codes:")]
        self.assertEqual(sorted(re.findall(r"`([a-z_]+)`", listed)), sorted(kinds))

    def test_every_column_of_the_offline_tables_is_named(self):
        text = doc()
        for argv in (["plan", "--mtbf-hours", "6", "--checkpoint-seconds", "60"],
                     ["budget", "--compute-samples-per-second", "100",
                      "--loader-samples-per-second", "80", "--gpus", "8",
                      "--price-per-gpu-hour", "2", "--useful-gpu-hours", "100"],
                     ["search-budget", "--trials", "20"]):
            out = subprocess.run([CTL, *argv], capture_output=True, text=True,
                                 timeout=30).stdout
            header = next(line for line in out.splitlines() if line.startswith(("INTERVAL",
                                                                                "LOADER",
                                                                                "STRATEGY")))
            for column in header.split():
                with self.subTest(verb=argv[0], column=column):
                    self.assertIn(f"`{column}`", text)

    def test_the_source_tables_columns_are_named(self):
        """Every upper-case header the CLI's tables use is in the doc."""
        sources = ""
        for name in ("render.cc", "top.cc", "search_budget_render.cc"):
            with open(os.path.join(REPO, "cli", name)) as f:
                sources += f.read()
        headers = set()
        for table in re.findall(r"Table table\(\{(.*?)\}\)", sources, re.S):
            headers.update(re.findall(r'"([A-Z_0-9]+)"', table))
        ranks = re.search(r"kColumns = new std::vector<std::string>\{(.*?)\}", sources, re.S)
        headers.update(re.findall(r'"([A-Z_0-9]+)"', ranks.group(1)))
        self.assertGreater(len(headers), 30, headers)
        text = doc()
        for column in sorted(headers):
            with self.subTest(column=column):
                self.assertIn(f"`{column}`", text)


if __name__ == "__main__":
    unittest.main()
