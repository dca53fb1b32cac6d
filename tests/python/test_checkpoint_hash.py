"""The checkpoint hash the rank helper computes on request
(agent/python/trainsup/_checkpoint_hash.py, docs/provenance.md).

Standard library only; the directory hash is checked against coreutils
(find, sort, sha256sum), as the documentation says anyone can. Tests wait
on conditions with deadlines, never on a sleep.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import unittest
from unittest import mock

import trainsup
from trainsup import _checkpoint_hash

from test_helper import HelperTestCase, _wait_until


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


class ContentHashTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tsup-ckpt")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def checkpoint_dir(self):
        """A directory whose sorted paths differ from a walk's order ("a-b"
        sorts before "a/x": '-' < '/'), with an empty file and a symlink."""
        top = os.path.join(self.dir, "step-40")
        _write(os.path.join(top, "a", "x.pt"), b"x" * 3000000)
        _write(os.path.join(top, "a-b.pt"), b"ab")
        _write(os.path.join(top, "meta", "empty"), b"")
        _write(os.path.join(top, "z.json"), b'{"step": 40}\n')
        os.symlink(os.path.join(top, "z.json"), os.path.join(top, "latest"))
        return top

    def test_a_file_is_what_sha256sum_prints(self):
        path = os.path.join(self.dir, "model.pt")
        _write(path, os.urandom(2500000))  # more than one read
        with open(path, "rb") as f:
            expected = hashlib.sha256(f.read()).hexdigest()
        self.assertEqual(_checkpoint_hash.content_hash(path), "sha256:" + expected)

    @unittest.skipUnless(shutil.which("sha256sum") and shutil.which("find"), "no coreutils")
    def test_a_directory_is_the_hash_of_sha256sums_manifest_in_sorted_order(self):
        top = self.checkpoint_dir()
        manifest = subprocess.run(
            "find . -type f -printf '%P\\n' | LC_ALL=C sort | xargs -d '\\n' sha256sum"
            " | sha256sum", shell=True, cwd=top, capture_output=True, text=True, check=True)
        self.assertEqual(_checkpoint_hash.content_hash(top),
                         "sha256:" + manifest.stdout.split()[0])

    def test_a_directory_hash_changes_with_a_file_or_its_name(self):
        top = self.checkpoint_dir()
        before = _checkpoint_hash.content_hash(top)
        os.rename(os.path.join(top, "a-b.pt"), os.path.join(top, "a-c.pt"))
        renamed = _checkpoint_hash.content_hash(top)
        _write(os.path.join(top, "a-c.pt"), b"ac")
        changed = _checkpoint_hash.content_hash(top)
        self.assertEqual(len({before, renamed, changed}), 3)

    def test_too_large_too_long_or_unreadable_is_no_hash(self):
        top = self.checkpoint_dir()
        size = 3000000 + 2 + len(b'{"step": 40}\n')
        self.assertIsNotNone(_checkpoint_hash.content_hash(top, max_bytes=size))
        self.assertIsNone(_checkpoint_hash.content_hash(top, max_bytes=size - 1))
        ticks = iter(range(1000))
        self.assertIsNone(_checkpoint_hash.content_hash(
            top, max_seconds=1.5, clock=lambda: float(next(ticks))))
        self.assertIsNone(_checkpoint_hash.content_hash(os.path.join(self.dir, "missing")))
        self.assertIsNone(_checkpoint_hash.content_hash("/dev/null"))  # not a file

    def test_only_sha256_is_a_request(self):
        for value in ("sha256", "SHA256", " sha256 "):
            self.assertTrue(_checkpoint_hash.requested(value), value)
        for value in (None, "", "sha256:abc", "md5", 256):
            self.assertFalse(_checkpoint_hash.requested(value), value)


class HelperHashesOnRequestTest(HelperTestCase):
    """Heartbeat(resumed_hash="sha256"): the record at once, the hash later."""

    def hashing_threads(self):
        return [t for t in threading.enumerate() if t.name == "trainsup-checkpoint-hash"]

    def test_the_record_goes_at_once_and_again_with_the_hash_when_done(self):
        path = os.path.join(self.dir, "step-40.pt")
        _write(path, b"weights")
        agent = self.agent()
        release = threading.Event()
        real = _checkpoint_hash.content_hash

        def slow(*args):
            release.wait(10)
            return real(*args)

        with mock.patch.object(_checkpoint_hash, "content_hash", slow):
            with self.agent_env(agent, LOCAL_RANK=0, TRAINSUP_HEARTBEAT_FIELDS=61):
                hb = trainsup.Heartbeat(start_step=40, resumed_path=path, resumed_hash="sha256")
            self.addCleanup(hb.close)
            # The constructor returned while the hash waits: the loop goes on.
            first = agent.messages()
            self.assertEqual([m["kind"] for m in first],
                             ["HEARTBEAT_KIND_START", "HEARTBEAT_KIND_PROVENANCE"])
            self.assertNotIn("resumed_hash", first[1]["provenance"])
            self.assertEqual(first[1]["provenance"]["resumed_path"], path)
            hb.step(41)
            release.set()
            got = agent.collect_until(
                lambda m: any(x["kind"] == "HEARTBEAT_KIND_PROVENANCE" for x in m))
        update = [m for m in got if m["kind"] == "HEARTBEAT_KIND_PROVENANCE"][0]
        expected = dict(first[1]["provenance"],
                        resumed_hash="sha256:" + hashlib.sha256(b"weights").hexdigest())
        self.assertEqual(update["provenance"], expected)
        self.assertEqual(update["generation"], 2)

    def test_no_hash_no_update_and_nothing_raised(self):
        agent = self.agent()
        with self.agent_env(agent, LOCAL_RANK=0, TRAINSUP_HEARTBEAT_FIELDS=61):
            hb = trainsup.Heartbeat(start_step=40, resumed_path=os.path.join(self.dir, "gone"),
                                    resumed_hash="sha256")
        self.addCleanup(hb.close)
        for thread in self.hashing_threads():
            thread.join(10)
        _wait_until(lambda: not self.hashing_threads(), what="the hash thread to end")
        kinds = [m["kind"] for m in agent.messages()]
        self.assertEqual(kinds, ["HEARTBEAT_KIND_START", "HEARTBEAT_KIND_PROVENANCE"])

    def test_a_hash_the_script_passes_is_sent_as_it_is_and_nothing_is_hashed(self):
        agent = self.agent()
        with mock.patch.object(_checkpoint_hash, "start") as start:
            with self.agent_env(agent, LOCAL_RANK=0, TRAINSUP_HEARTBEAT_FIELDS=61):
                hb = trainsup.Heartbeat(start_step=40, resumed_path="/ckpt/step-40",
                                        resumed_hash="sha256:abc")
            self.addCleanup(hb.close)
            with self.agent_env(agent, LOCAL_RANK=0, TRAINSUP_HEARTBEAT_FIELDS=61):
                other = trainsup.Heartbeat(start_step=0, resumed_hash="sha256")  # no path
            self.addCleanup(other.close)
        start.assert_not_called()
        records = [m["provenance"] for m in agent.messages()
                   if m["kind"] == "HEARTBEAT_KIND_PROVENANCE"]
        self.assertEqual(records[0]["resumed_hash"], "sha256:abc")
        self.assertNotIn("resumed_hash", records[1])


if __name__ == "__main__":
    unittest.main()
