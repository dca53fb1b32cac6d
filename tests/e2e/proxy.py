"""A TCP proxy between agents and trainsupd that can cut the network.

cut() resets every connection through it (RST, as a failing switch or a
firewall would) and refuses new ones; blackhole() swallows everything instead
and closes nothing (a dead switch port, a firewall that drops: new
connections are accepted and go nowhere); heal() lets connections through
again. The agents and their ranks live on: only the path to the supervisor
breaks.
"""

import select
import socket
import struct
import threading


class PartitionProxy:
    def __init__(self, upstream):
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._cut = False
        self._forwarding = threading.Event()  # clear: a black hole
        self._forwarding.set()
        self._pairs = []
        self._closing = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @staticmethod
    def _reset(sock):
        """Close with an RST, not a FIN: the peer sees 'connection reset'."""
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        try:
            sock.close()
        except OSError:
            pass

    def cut(self):
        with self._lock:
            self._cut = True
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            self._reset(a)
            self._reset(b)

    def blackhole(self):
        self._forwarding.clear()

    def heal(self):
        with self._lock:
            self._cut = False
        self._forwarding.set()

    def close(self):
        self._closing = True
        self._forwarding.set()
        self.cut()
        try:
            self._listener.close()
        except OSError:
            pass

    def _accept(self):
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refused = self._cut
            if refused:
                self._reset(client)
                continue
            self._forwarding.wait()  # a black hole: accepted, going nowhere
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                self._reset(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, a, b):
        sockets = [a, b]
        try:
            while True:
                self._forwarding.wait()  # a black hole: nothing read, sent or closed
                # Back to the wait above within 50ms of a black hole opening,
                # before the peers' next bytes (read then, they would break it).
                ready, _, _ = select.select(sockets, [], [], 0.05)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        raise OSError("closed")
                    if not self._forwarding.is_set():
                        # Read as the hole opened: swallowed, so the stream
                        # is broken for both ends once it heals.
                        raise OSError("swallowed")
                    (b if s is a else a).sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            with self._lock:
                if (a, b) in self._pairs:
                    self._pairs.remove((a, b))
            for s in sockets:
                try:
                    s.close()
                except OSError:
                    pass
