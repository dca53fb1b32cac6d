"""The rank's datagrams on their way to the node's agent (the helper's transport).

Part of the trainsup helper (see the package's docstring): the API in
trainsup/__init__.py makes each message; this module only queues and sends
them, in order, without ever blocking the training thread for long.
Standard library only.
"""

import collections
import errno
import itertools
import threading
import time

# sendto errors that mean "the agent's queue is full right now": the message
# is kept and sent again. Any other error (the agent is gone) drops it.
_QUEUE_FULL = frozenset((errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS))

# The longest a caller waits for the outbox's lock. Holders keep it for
# microseconds; the bound only matters when a signal handler re-enters the
# helper on a thread that holds it, or under heavy contention for the GIL.
_LOCK_WAIT_S = 0.001

# The background retrier's pause between attempts, and how long it stays
# once nothing is pending.
_RETRY_INTERVAL_S = 0.01
_RETRIER_IDLE_S = 0.5

# The pause between attempts while the final EXIT/EXCEPTION waits for a
# full queue (the wait itself: trainsup._FINAL_PATIENCE_S).
_SETTLE_INTERVAL_S = 0.002

# A STEP waits for the rank's next message, to share its datagram (an agent
# that splits datagrams into records, TRAINSUP_HEARTBEAT_RECORDS), at most
# about this long (the outbox's lingerer sends it on its own then), and
# the lingerer ends after _LINGER_IDLE_S without one.
_RIDE_MAX_AGE_S = 0.05
_LINGER_IDLE_S = 1.0

# The largest datagram the agent reads (agent/heartbeat_decoder.h), and the
# most characters a message gains on the way (datagrams_dropped, a newline).
_MAX_DATAGRAM_BYTES = 4096
_TAIL_CHARS = 48

# Deadlines use the real clock even where a test fakes time.monotonic.
_clock = time.monotonic


class _Outbox:
    """The rank's datagrams on their way to the agent, in the order of their events.

    Linux queues at most net.unix.max_dgram_qlen datagrams on the agent's
    socket; when it is full, sendto fails with EAGAIN. Such a message stays
    PENDING, and later messages queue behind it (what reaches the agent is
    always a subsequence of what happened, in order). Pending messages are
    kept per slot (trainsup._SLOT_OF_KIND): a newer one replaces the pending one of its
    slot and moves to the back of the queue; the replaced one counts as
    dropped. A daemon thread, started on the first refusal and gone
    _RETRIER_IDLE_S after nothing is pending, retries every
    _RETRY_INTERVAL_S, so that a rank
    blocked inside a collective still gets its last state out.

    Contracts: submit() returns within about _LOCK_WAIT_S and never raises;
    no thread holds the lock across a sleep. ``sent`` counts datagrams handed
    to the socket, ``dropped`` the messages given up on (replaced while
    pending, or refused by a hard error); every datagram carries ``dropped``
    as of its sending in ``datagrams_dropped``. A message is its JSON object
    without that field and the closing brace (Heartbeat._message). `path`:
    None when `sock` is connected to the agent's socket (send() skips the
    path's lookup that sendto() makes each time).

    One datagram carries up to `records` messages, one JSON object a line,
    when the agent splits them (TRAINSUP_HEARTBEAT_RECORDS): pending ones go
    out together, and a message that can wait (hold(): a STEP) rides on the
    next one. ``sent`` and ``dropped`` count messages, not datagrams.
    """

    def __init__(self, sock, path, records=1):
        self.sent = 0
        self.dropped = 0
        self._sock = sock
        self._path = path
        self._records = max(1, records)
        # The held message (hold()) and when it was held (_clock()); the
        # lingerer (a thread, while messages are held) sends one that waited
        # _RIDE_MAX_AGE_S.
        self._rider = None
        self._rider_at = 0.0
        self._lingerer = None
        self._lock = threading.Lock()
        # (slot, message) not yet in the queue. Appended without the lock
        # (deque.append is atomic); emptied under it.
        self._inbox = collections.deque()
        self._pending = collections.OrderedDict()  # slot -> message, oldest first
        self._retrier = None  # the background thread, while it runs
        self._closed = threading.Event()  # the retrier waits on it
        self._is_closed = False  # the same, read on the send path

    def submit(self, slot, message):
        """Queues `message` behind the pending ones and sends what the agent takes."""
        if not self._pending and self._lock.acquire(False):
            # The common case, nothing waiting: send it at once. The same as
            # the queue's way below, in fewer steps.
            retrier = None
            try:
                if not self._pending and not self._inbox:
                    rider = self._rider
                    try:
                        if rider is None:
                            if self._send_locked((message,)) == "sent":
                                self.sent += 1
                                message = None
                        elif len(rider) + len(message) <= _MAX_DATAGRAM_BYTES - 2 * _TAIL_CHARS:
                            if self._send_locked((rider, message)) == "sent":
                                self._rider = None
                                self.sent += 2
                                message = None
                    except BaseException:  # a signal handler's: kept, pending
                        if self._rider is not None:
                            self._take_rider_locked()
                        self._pending[slot] = message
                        raise
                    if message is not None:  # refused, failed, too long: the queue's way
                        if self._rider is not None:
                            self._take_rider_locked()
                        self._pending[slot] = message  # kept if the send raises
                        self._flush_locked()
                        message = None
                        retrier = self._new_retrier_locked()
            finally:
                self._lock.release()
            if retrier is not None:
                self._start(retrier)
            if message is None:
                if self._inbox:  # another thread's, left while this one held the lock
                    self._pump(_LOCK_WAIT_S)
                return
        self._inbox.append((slot, message))
        self._pump(_LOCK_WAIT_S)

    def hold(self, message):
        """Holds `message` (a STEP, of the progress slot) for the next one,
        to go out in its datagram: one send instead of two. Sent on its own
        after about _RIDE_MAX_AGE_S when no other comes (the lingerer), or at
        once when the agent takes one record a datagram or messages are
        pending. A message held before goes now."""
        if self._records < 2 or self._pending or self._inbox or not self._lock.acquire(False):
            return self.submit("progress", message)
        lingerer = None
        queued = self._pending or self._inbox  # since the check above
        try:
            if not queued and self._rider is not None:
                self._take_rider_locked()
                self._flush_locked()
                queued = bool(self._pending)  # refused: this one queues behind it
            if not queued:
                self._rider = message
                self._rider_at = _clock()
                if self._lingerer is None:
                    lingerer = self._new_lingerer_locked()
        finally:
            self._lock.release()
        if queued:
            return self.submit("progress", message)
        if lingerer is not None:
            self._start(lingerer)
        return None

    def release_old(self):
        """Sends the held message when it waited _RIDE_MAX_AGE_S (cheap
        when none waits): the training loop's calls that send nothing."""
        if self._rider is not None and _clock() - self._rider_at >= _RIDE_MAX_AGE_S:
            self._pump(_LOCK_WAIT_S)

    def settle(self, patience):
        """At exit only, never from the training loop: tries again until
        nothing waits or `patience` seconds have passed."""
        deadline = _clock() + patience
        while True:
            self._pump(_LOCK_WAIT_S)
            if not self.waiting() or _clock() >= deadline:
                return
            time.sleep(_SETTLE_INTERVAL_S)

    def waiting(self):
        """Whether any message waits to be sent (read without the lock)."""
        return bool(self._inbox) or bool(self._pending) or self._rider is not None

    def close(self):
        """Sends a held message (one try), gives up on what is pending
        (counted as dropped) and closes the socket."""
        if not self._lock.acquire(timeout=0.1):
            self._is_closed = True
            self._closed.set()
            return  # a holder is stuck under us (a signal handler): leave the socket
        try:
            self._take_inbox_locked()
            self._flush_locked()
            self._is_closed = True
            self._closed.set()
            self.dropped += len(self._pending)
            self._pending.clear()
            try:
                self._sock.close()
            except OSError:
                pass
        finally:
            self._lock.release()

    # -- internals: the ones named *_locked run with the lock held -------------

    def _pump(self, wait):
        """Moves the inbox into the queue and sends from its head.

        A caller that gets no lock within `wait` seconds leaves its message in
        the inbox: every holder looks at the inbox again after it lets go of
        the lock, so a message never stays there unseen.
        """
        while True:
            if not self._lock.acquire(timeout=wait):
                return
            try:
                self._take_inbox_locked()
                self._flush_locked()
                retrier = self._new_retrier_locked()
            finally:
                self._lock.release()
            if retrier is not None:
                self._start(retrier)
            if not self._inbox:
                return

    def _take_inbox_locked(self):
        if self._rider is not None:  # older than anything in the inbox
            self._take_rider_locked()
        while self._inbox:
            slot, message = self._inbox.popleft()
            if self._pending.pop(slot, None) is not None:
                self.dropped += 1
            self._pending[slot] = message

    def _take_rider_locked(self):
        """The held message joins the queue, in its own slot (a newer
        progress message does not replace it)."""
        if self._pending.pop("ride", None) is not None:
            self.dropped += 1
        self._pending["ride"] = self._rider
        self._rider = None

    def _flush_locked(self):
        """Sends pending messages, oldest first, until the agent refuses
        one: as many a datagram as the agent takes (_records) and fit."""
        pending = self._pending
        while pending:
            messages = []
            size = 0
            for message in itertools.islice(pending.values(), self._records):
                size += len(message) + _TAIL_CHARS  # ASCII: json's escapes
                if messages and size > _MAX_DATAGRAM_BYTES:
                    break
                messages.append(message)
            outcome = self._send_locked(messages)
            if outcome == "refused":
                return
            # Counted before they leave the queue: once waiting() is False,
            # the counts are final.
            if outcome == "sent":
                self.sent += len(messages)
            else:
                self.dropped += len(messages)
            for _ in messages:
                pending.popitem(last=False)

    def _send_locked(self, messages):
        """One datagram of `messages`, a line each: "sent", "refused" (queue
        full, try again) or "failed"."""
        if self._is_closed:
            return "failed"
        try:
            tail = ',"datagrams_dropped":%d}' % self.dropped
            data = (messages[0] + tail if len(messages) == 1 else
                    (tail + "\n").join(messages) + tail).encode()
            if self._path is None:
                self._sock.send(data)
            else:
                self._sock.sendto(data, self._path)
        except OSError as e:
            return "refused" if e.errno in _QUEUE_FULL else "failed"
        except Exception:  # noqa: BLE001
            return "failed"
        return "sent"

    def _new_retrier_locked(self):
        """The retrier to start when messages are pending and none runs."""
        if not self._pending or self._retrier is not None or self._closed.is_set():
            return None
        self._retrier = threading.Thread(target=self._retry, name="trainsup-retry",
                                         daemon=True)
        return self._retrier

    def _new_lingerer_locked(self):
        """The lingerer to start when a message is held and none runs."""
        if self._lingerer is not None or self._closed.is_set():
            return None
        self._lingerer = threading.Thread(target=self._linger, name="trainsup-linger",
                                          daemon=True)
        return self._lingerer

    def _start(self, thread):
        try:
            thread.start()
        except Exception:  # noqa: BLE001 - no thread (shutdown): the next call retries
            if thread is self._retrier:
                self._retrier = None
            if thread is self._lingerer:
                self._lingerer = None

    def _linger(self):
        """The lingerer's body: every _RIDE_MAX_AGE_S, sends the held message
        when it waited that long (no next message came: the rank waits for
        its input, or hangs there); ends once none was held for
        _LINGER_IDLE_S, or when the outbox is closed."""
        idle_since = None
        while not self._closed.wait(_RIDE_MAX_AGE_S):
            now = _clock()
            retrier = None
            with self._lock:  # held for microseconds by everyone else
                if self._rider is None:
                    idle_since = now if idle_since is None else idle_since
                    if now - idle_since >= _LINGER_IDLE_S:
                        self._lingerer = None
                        return
                    continue
                idle_since = None
                if now - self._rider_at >= _RIDE_MAX_AGE_S:
                    self._take_inbox_locked()
                    self._flush_locked()
                    retrier = self._new_retrier_locked()
            if retrier is not None:
                self._start(retrier)
            if self._inbox:  # another thread's, left while this one held the lock
                self._pump(_LOCK_WAIT_S)

    def _retry(self):
        """The retrier's body: one attempt every _RETRY_INTERVAL_S until
        nothing was pending for _RETRIER_IDLE_S (a queue full once is
        often full again soon: a thread started costs the training loop
        tens of microseconds) or the outbox is closed."""
        idle_since = None
        while not self._closed.wait(_RETRY_INTERVAL_S):
            now = _clock()
            with self._lock:  # held for microseconds by everyone else
                if self._pending or self._inbox:  # (a held message waits for its ride)
                    self._take_inbox_locked()
                    self._flush_locked()
                if self._pending:
                    idle_since = None
                elif idle_since is None:
                    idle_since = now
                done = idle_since is not None and now - idle_since >= _RETRIER_IDLE_S
                if done:
                    self._retrier = None
            if done:
                break
        if self._inbox:  # what reached it while this thread held the lock
            self._pump(_LOCK_WAIT_S)
