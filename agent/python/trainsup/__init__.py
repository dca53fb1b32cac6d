"""trainsup rank helper: tells the node's trainsup-agent what this rank is doing.

Standard library only. Two lines in a training script::

    import trainsup
    hb = trainsup.Heartbeat()            # identity from torchrun's environment
    for step in range(start, total):
        with hb.compute():               # the rank's own work, before its collective
            batch = next(loader); loss = model(batch); loss.backward()
        all_reduce(...); optimizer.step()
        hb.step(step, data_wait_s=data_wait, loss=loss, lr=lr)
        if hb.should_checkpoint(step):
            with hb.checkpointing(step):
                save_checkpoint(...)

Guarantees: it never blocks the training loop (one non-blocking datagram per
event; when the agent is busy or gone the datagram is dropped and counted in
``hb.dropped``), never raises into it, and is a silent no-op when the process
does not run under ``trainsup-agent`` (no ``TRAINSUP_SOCKET`` in the environment).

The datagram is the JSON form of ``trainsup.v1.RankHeartbeat``
(proto/trainsup/v1/heartbeat.proto), with the proto field names.
"""

import contextlib
import json
import math
import os
import socket
import sys
import time

__all__ = ["Heartbeat", "should_checkpoint"]

# Limits the supervisor enforces (common/limits.h): the helper truncates to them.
_MAX_EXCEPTION_TYPE = 256
_MAX_EXCEPTION_MESSAGE = 1024


def _env_int(name, default=0):
    try:
        return int(os.environ.get(name, default))
    except (TypeError, ValueError):
        return default


def _number(value):
    """A float for the JSON of a proto double, or None when it is not a number.

    Accepts python numbers and 0-d tensors (anything with ``float()``). JSON has
    no NaN or infinity; Protobuf's JSON mapping spells them as strings.
    """
    if value is None:
        return None
    try:
        f = float(value)
    except Exception:  # noqa: BLE001 - a helper must never raise
        return None
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return f


def _duration(value):
    """A duration for the wire: finite and >= 0 (else 0, "not measured")."""
    try:
        f = float(value or 0.0)
    except Exception:  # noqa: BLE001
        return 0.0
    return f if math.isfinite(f) and f > 0 else 0.0


def _truncate_utf8(text, limit):
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def _parse_plans(document):
    """Plans from the JSON of trainsup.v1.CheckpointPlans (int64 fields are
    strings in Protobuf's JSON mapping)."""
    plans = []
    for p in document.get("plans", []):
        plans.append({
            "plan_id": int(p.get("plan_id", 0)),
            "anchor_step": int(p.get("anchor_step", 0)),
            "interval_steps": int(p.get("interval_steps", 0)),
            "effective_from_step": int(p.get("effective_from_step", 0)),
            "one_off_steps": [int(s) for s in p.get("one_off_steps", [])],
        })
    return plans


def should_checkpoint(plans, step):
    """The checkpoint decision (the same as ShouldCheckpoint in the supervisor's
    core, checkpoint_schedule.cc): for step s the plan in force is the one
    with the greatest effective_from_step <= s (the greatest plan_id among
    equals); s is a checkpoint step when (s - anchor) % interval == 0 under it,
    or when any plan names s as a one-off."""
    in_force = None
    for plan in plans:
        if step in plan["one_off_steps"]:
            return True
        if plan["effective_from_step"] > step:
            continue
        if in_force is None or (plan["effective_from_step"], plan["plan_id"]) > \
                (in_force["effective_from_step"], in_force["plan_id"]):
            in_force = plan
    if in_force is None or in_force["interval_steps"] <= 0 or step < in_force["anchor_step"]:
        return False
    return (step - in_force["anchor_step"]) % in_force["interval_steps"] == 0


class Heartbeat:
    """One rank's link to its agent. Create one per rank process."""

    def __init__(self, job=None, rank=None, local_rank=None, world_size=None, start_step=0):
        env = os.environ
        self.enabled = bool(env.get("TRAINSUP_SOCKET"))
        self.sent = 0
        self.dropped = 0
        self._path = env.get("TRAINSUP_SOCKET", "")
        self._identity = {
            "job": job if job is not None else env.get("TRAINSUP_JOB", ""),
            "rank": rank if rank is not None else _env_int("RANK"),
            "local_rank": local_rank if local_rank is not None else _env_int("LOCAL_RANK"),
            "world_size": world_size if world_size is not None else _env_int("WORLD_SIZE", 1),
            "pid": os.getpid(),
            "generation": _env_int("TRAINSUP_GENERATION"),
            "restart_count": _env_int("TORCHELASTIC_RESTART_COUNT"),
        }
        self._last_step = start_step - 1
        self._last_step_time = None
        self._pending_compute_s = None
        self._sock = None
        self._plan_path = env.get("TRAINSUP_PLAN_FILE", "")
        self._plan_stamp = None
        self._plans = []
        if not self.enabled:
            return
        try:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
        except OSError:
            self.enabled = False
            return
        self._send("HEARTBEAT_KIND_START", step=max(start_step, 0))
        self._install_excepthook()

    # -- the training loop's calls -------------------------------------------

    def step(self, step, *, step_duration_s=None, data_wait_s=0.0, compute_s=None, loss=None,
             lr=None, grad_norm=None, samples=None, device_memory_bytes=None):
        """Reports that training step ``step`` completed. Call once per step.

        ``step_duration_s`` defaults to the time since the previous call (the
        first call reports no duration). ``compute_s`` defaults to the length of
        the last ``with hb.compute():`` block.
        """
        try:
            now = time.monotonic()
            if step_duration_s is None:
                step_duration_s = 0.0 if self._last_step_time is None else now - self._last_step_time
            self._last_step_time = now
            self._last_step = int(step)
            if compute_s is None:
                compute_s = self._pending_compute_s
            self._pending_compute_s = None
            fields = {
                "step": int(step),
                "step_duration_seconds": _duration(step_duration_s),
                "data_wait_seconds": _duration(data_wait_s),
            }
            optional = {
                "compute_seconds": None if compute_s is None else _duration(compute_s),
                "loss": _number(loss),
                "learning_rate": _number(lr),
                "grad_norm": _number(grad_norm),
            }
            fields.update({k: v for k, v in optional.items() if v is not None})
            if samples is not None:
                fields["samples"] = int(samples)
            if device_memory_bytes is not None:
                fields["device_memory_bytes"] = int(device_memory_bytes)
            self._send("HEARTBEAT_KIND_STEP", when=now, **fields)
        except Exception:  # noqa: BLE001
            pass

    @contextlib.contextmanager
    def compute(self, step=None):
        """Brackets the rank's collective-free work of the next step.

        A rank still inside this block when its peers have left theirs is the
        one holding up the collective: this is how trainsup names the culprit of
        a hang, and measures stragglers by their own work instead of the wall
        step time every rank shares.
        """
        current = self._last_step + 1 if step is None else step
        begin = time.monotonic()
        self._safe_send("HEARTBEAT_KIND_COMPUTE_BEGIN", when=begin, step=current)
        try:
            yield
        finally:
            end = time.monotonic()
            self._pending_compute_s = end - begin
            self._safe_send("HEARTBEAT_KIND_COMPUTE_END", when=end, step=current)

    def should_checkpoint(self, step):
        """Whether to checkpoint after ``step``, under the supervisor's plans.

        A pure function of the plans this rank holds (``TRAINSUP_PLAN_FILE``,
        written by the agent): every rank holding the same plans answers the
        same for the same step, and a plan takes effect only at a step far
        enough ahead that every rank holds it by then, so a collective
        checkpoint never hangs on ranks that disagree. Until the supervisor
        publishes a plan, and outside an agent: False.
        """
        try:
            self._reload_plans()
            return should_checkpoint(self._plans, int(step))
        except Exception:  # noqa: BLE001
            return False

    @contextlib.contextmanager
    def checkpointing(self, step, async_seconds=0.0):
        """Brackets the part of a checkpoint that blocks the training loop."""
        begin = time.monotonic()
        self._safe_send("HEARTBEAT_KIND_CHECKPOINT_BEGIN", when=begin, step=step)
        try:
            yield
        finally:
            end = time.monotonic()
            self._safe_send("HEARTBEAT_KIND_CHECKPOINT_END", when=end, step=step,
                            checkpoint_blocking_seconds=end - begin,
                            checkpoint_async_seconds=_duration(async_seconds))

    def close(self):
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
            self.enabled = False

    # -- internals -------------------------------------------------------------

    def _reload_plans(self):
        """Re-reads the plan file when it changed (one stat per call)."""
        if not self._plan_path:
            return
        try:
            st = os.stat(self._plan_path)
        except OSError:
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._plan_stamp:
            return
        with open(self._plan_path) as f:
            self._plans = _parse_plans(json.load(f))
        self._plan_stamp = stamp

    def _safe_send(self, kind, **fields):
        try:
            self._send(kind, **fields)
        except Exception:  # noqa: BLE001
            pass

    def _send(self, kind, when=None, **fields):
        """Sends the datagram of one event. `when`: the event's time on the
        monotonic clock (now when not given), sent as monotonic_seconds."""
        if not self.enabled or self._sock is None:
            return
        message = dict(self._identity)
        message["kind"] = kind
        message["monotonic_seconds"] = time.monotonic() if when is None else when
        message.update(fields)
        data = json.dumps(message, separators=(",", ":")).encode("utf-8")
        try:
            self._sock.sendto(data, self._path)
            self.sent += 1
        except OSError:  # full (EAGAIN), agent gone (ENOENT/ECONNREFUSED), ...
            self.dropped += 1

    def _install_excepthook(self):
        previous = sys.excepthook

        def hook(exc_type, exc, tb):
            try:
                self._send("HEARTBEAT_KIND_EXCEPTION",
                           step=max(self._last_step, 0),
                           exception_type=_truncate_utf8(getattr(exc_type, "__name__", "?"),
                                                         _MAX_EXCEPTION_TYPE),
                           exception_message=_truncate_utf8(str(exc), _MAX_EXCEPTION_MESSAGE))
            except Exception:  # noqa: BLE001
                pass
            previous(exc_type, exc, tb)

        sys.excepthook = hook
