#!/usr/bin/env python3
"""Runs build/bench/fenced_write against a 3-member etcd on loopback that it
starts (tests/ha/ha_cluster.py; data in a temporary directory, removed
after). See docs/ha.md "Measured".

    python3 bench/fenced_write.py [decisions] [nodes] [rounds]
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "ha"))
from ha_cluster import EtcdCluster  # noqa: E402

BENCH = os.environ.get("FENCED_WRITE", os.path.join(ROOT, "build", "bench", "fenced_write"))


def main():
    etcd = EtcdCluster(3)
    try:
        return subprocess.run([BENCH, etcd.endpoints, *sys.argv[1:]]).returncode
    finally:
        etcd.close()


if __name__ == "__main__":
    sys.exit(main())
