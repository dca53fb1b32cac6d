#!/usr/bin/env python3
"""The training-signal false alarms of a whole suite's run.

    TRAINSUP_E2E_SIGNAL_CENSUS=/tmp/census.jsonl bash scripts/test.sh
    python3 scripts/signal_census.py /tmp/census.jsonl

Every end-to-end test built on ClusterTestCase appends the signal events its
trainsupd raised (tests/e2e/cluster.py). A test that injects a training fault
on purpose is expected to raise some; every signal event of any other test is
a false alarm: a rule that fired on a healthy loss, a restart's idle steps, a
crash, a hang or a correct resume. Prints the counts and lists the false
alarms; exits 1 if there is any.
"""

import collections
import json
import sys

# Test modules whose tests inject training faults (NaN, loss shifts, slow
# nodes, memory growth, corrupted digests, bad resumes and checkpoints, kill
# criteria): their signal events are expected ones.
INJECTING = ("test_signals.", "test_resume.", "test_fallback.", "test_kill.",
             "test_diagnose.")


def main(path):
    tests = []
    with open(path) as f:
        tests = [json.loads(line) for line in f if line.strip()]
    clean = [t for t in tests if not any(m in t["test"] for m in INJECTING)]
    false_alarms = [(t["test"], s) for t in clean for s in t["signals"]]
    kinds = collections.Counter(s["kind"] for _, s in false_alarms)
    expected = sum(len(t["signals"]) for t in tests if t not in clean)
    print(f"{len(tests)} tests counted: {len(tests) - len(clean)} inject training faults "
          f"({expected} signal events), {len(clean)} do not")
    print(f"false alarms: {len(false_alarms)}" +
          (f" ({', '.join(f'{k} {n}' for k, n in kinds.most_common())})" if kinds else ""))
    for test, s in false_alarms:
        print(f"  {test}: {s['kind']} (job {s['job']}): {s['message']}")
    return 1 if false_alarms else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
