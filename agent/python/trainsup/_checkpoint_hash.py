"""The content hash of the checkpoint a generation resumed, on request.

``trainsup.Heartbeat(start_step=S, resumed_path=P, resumed_hash="sha256")``
asks the helper to hash P itself (docs/provenance.md). The hash is computed
on a daemon thread of its own, at the lowest CPU priority, and sent when
done as a second provenance record; the training loop neither waits for it
nor hears of its failures.

What is hashed, so that anyone can check it with coreutils:

- a file: its bytes, ``sha256:`` + what ``sha256sum FILE`` prints;
- a directory: the lines ``<sha256 of the file>  <path relative to P>\\n`` of
  its regular files (symbolic links are not followed, nor counted), sorted
  by path, hashed in turn. For names without a newline or a backslash that
  is ``cd P && find . -type f -printf '%P\\n' | LC_ALL=C sort |
  xargs -d '\\n' sha256sum | sha256sum``.

Bounded: a checkpoint larger than MAX_BYTES is not read at all, and hashing
stops at MAX_SECONDS; then, as when P cannot be read, no hash is sent.

Standard library only.
"""

import hashlib
import os
import stat
import threading
import time

# What the script passes as resumed_hash to have the helper compute it.
REQUEST = "sha256"

# The most bytes hashed (the files' sizes summed before any is read): a
# larger checkpoint is not hashed. 16 GiB is about 15 s of one core at
# hashlib's 1.1 GB/s (measured on the development machine), and the time to
# read it.
MAX_BYTES = 16 * 2**30

# The longest the hash may take; past it, it is given up on.
MAX_SECONDS = 600.0

# Bytes read at a time (hashlib and the read both release the GIL).
_CHUNK = 1 << 20


def requested(resumed_hash):
    """Whether `resumed_hash` asks the helper to compute the hash."""
    return isinstance(resumed_hash, str) and resumed_hash.strip().lower() == REQUEST


class _TooLong(Exception):
    pass


def _files(path):
    """(relative name, absolute name, size) of the regular files to hash:
    `path` itself when it is a file (its name ""), else the files under it
    sorted by their path relative to it. Raises OSError when unreadable."""
    st = os.stat(path)
    if stat.S_ISREG(st.st_mode):
        return [("", path, st.st_size)]
    if not stat.S_ISDIR(st.st_mode):
        raise OSError("not a file or a directory: %s" % path)
    found = []

    def failed(error):
        raise error

    for top, dirs, names in os.walk(path, onerror=failed):
        dirs.sort()
        for name in names:
            full = os.path.join(top, name)
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode):
                found.append((os.path.relpath(full, path).replace(os.sep, "/"), full, st.st_size))
    # By the whole relative path, as `sort` orders find's lines (codepoint
    # order of str is UTF-8's byte order).
    found.sort(key=lambda f: f[0])
    return found


def _hash_file(name, deadline, clock, buffer):
    digest = hashlib.sha256()
    view = memoryview(buffer)
    with open(name, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buffer)
            if not n:
                return digest.hexdigest()
            digest.update(view[:n])
            if clock() > deadline:
                raise _TooLong()


def content_hash(path, max_bytes=MAX_BYTES, max_seconds=MAX_SECONDS, clock=time.monotonic):
    """``"sha256:<hex>"`` of the file or directory `path` (see the module's
    doc), or None: unreadable, larger than `max_bytes`, or longer to hash
    than `max_seconds` by `clock`. Never raises."""
    try:
        deadline = clock() + max_seconds
        files = _files(os.fspath(path))
        if sum(size for _, _, size in files) > max_bytes:
            return None
        buffer = bytearray(_CHUNK)
        if len(files) == 1 and files[0][0] == "":
            return "sha256:" + _hash_file(files[0][1], deadline, clock, buffer)
        manifest = hashlib.sha256()
        for relative, full, _ in files:
            line = "%s  %s\n" % (_hash_file(full, deadline, clock, buffer), relative)
            manifest.update(line.encode("utf-8", "surrogateescape"))
        return "sha256:" + manifest.hexdigest()
    except Exception:  # noqa: BLE001 (unreadable, gone meanwhile, too long)
        return None


def start(path, send, max_bytes=MAX_BYTES, max_seconds=MAX_SECONDS):
    """Hashes `path` on a daemon thread at the lowest CPU priority, then
    calls ``send(digest)`` when there is a hash (none when content_hash
    found none). Returns the thread, or None when it could not start.
    Never raises."""
    def run():
        try:
            # Linux: a thread's nice value is its own.
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except Exception:  # noqa: BLE001
            pass
        try:
            digest = content_hash(path, max_bytes, max_seconds)
            if digest is not None:
                send(digest)
        except Exception:  # noqa: BLE001
            pass

    try:
        thread = threading.Thread(target=run, name="trainsup-checkpoint-hash", daemon=True)
        thread.start()
        return thread
    except Exception:  # noqa: BLE001
        return None
