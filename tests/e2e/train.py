"""A small data-parallel training job (gloo on CPU) that uses the trainsup helper.

Run by torchrun under trainsup-agent in the end-to-end tests and the demo. It
checkpoints its full state (model, optimizer, step, RNG, data position) and
resumes from the last complete checkpoint, and it can inject the failures
trainsup must handle: a hang before the all-reduce, a crash, a straggling rank, a
framework's own verdict (an exit code, hb.verdict), a data loader slowed on one
node, and the training signals' faults: a NaN loss, a replica whose digest
disagrees, a node that slows down, memory that grows, a resume that does not
restore the optimizer's or the learning-rate scheduler's state; a checkpoint that gives
a NaN loss soon after every load (and a script that raises on it), and batches that make
the loss spike. It resumes where
the supervisor says (hb.resume_limit(), hb.skip_range()). Injected failures are logged
(an "injected" line with the time) as they happen.
Every rank appends one JSON line per completed step to --log (if given), so
tests can check what the job itself did.
"""

import argparse
import errno
import atexit
import ctypes
import datetime
import json
import math
import os
import random
import signal
import sys
import time

import torch
import torch.distributed as dist

import trainsup

GENERATION = int(os.environ.get("TRAINSUP_GENERATION", "0"))
NODE = os.environ.get("TRAINSUP_NODE", "")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=100, help="steps to train (in all)")
    p.add_argument("--step-seconds", type=float, default=0.05,
                   help="simulated compute per step, seconds")
    p.add_argument("--pg-timeout", type=float, default=1800.0,
                   help="process-group (collective) timeout, seconds; torch's default is 1800")
    p.add_argument("--log", default="", help="append one JSON line per step and rank here")
    p.add_argument("--checkpoint-dir", default="", help="checkpoint here, resume from here")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="checkpoint every N steps (0: never)")
    p.add_argument("--checkpoint-extra-seconds", type=float, default=0.0,
                   help="a slower checkpoint store: each save takes this much longer")
    p.add_argument("--checkpoint-fail-from", type=int, default=-1,
                   help="every save from this step on fails (OSError: no space left on "
                        "device, raised inside hb.checkpointing); the script logs it and "
                        "trains on unprotected, as a script that catches its save errors does")
    p.add_argument("--planned-checkpoints", action="store_true",
                   help="checkpoint when the supervisor's plan says (hb.should_checkpoint)")
    p.add_argument("--data-wait-seconds", type=float, default=0.0,
                   help="a slow input pipeline: each batch takes this long to arrive")
    p.add_argument("--teardown-seconds", type=float, default=0.0,
                   help="a slow end: after sys.exit (the helper has said EXIT), the "
                        "interpreter's teardown takes this long (destroying CUDA and NCCL "
                        "state on a loaded host)")
    # Failure injection. A failure happens at the first step >= its step, in
    # every generation unless a generation is given.
    p.add_argument("--emulate-flight-recorder", default="",
                   help="a directory of NCCL flight recorder dumps (RANK in each name, as "
                        "tests/testdata/flight_recorder's hang_rankRANK.pkl): play torch's "
                        "watchdog, which gloo has not: make the pipe "
                        "$TORCH_NCCL_DEBUG_INFO_PIPE_FILE + rank + .pipe and, when a byte is "
                        "written to it, write this rank's dump to "
                        "$TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank (a thread of its own: it "
                        "answers while the rank hangs)")
    p.add_argument("--hang-rank", type=int, default=-1,
                   help="this rank stops before its all-reduce at --hang-step and never returns")
    p.add_argument("--hang-node", default="",
                   help="with --hang-local-rank: hang the rank of this node (TRAINSUP_NODE)")
    p.add_argument("--hang-local-rank", type=int, default=-1)
    p.add_argument("--hang-step", type=int, default=-1)
    p.add_argument("--hang-generation", type=int, default=-1)
    p.add_argument("--hang-file", default="",
                   help="the hang rank stops at its first step after this file exists "
                        "(a hang injected at a time the test chooses)")
    p.add_argument("--crash-rank", type=int, default=-1,
                   help="this rank raises at --crash-step (uncaught: exit code 1)")
    p.add_argument("--crash-node", default="",
                   help="with --crash-local-rank: crash the rank of this node (TRAINSUP_NODE)")
    p.add_argument("--crash-local-rank", type=int, default=-1)
    p.add_argument("--crash-step", type=int, default=-1)
    p.add_argument("--crash-generation", type=int, default=-1)
    p.add_argument("--crash-mode", default="raise",
                   choices=["raise", "value-error", "infra", "sys-exit", "os-exit", "sigkill",
                            "sigsegv", "sigabrt", "caught-infra", "infra-line-sigkill",
                            "infra-line-os-exit"],
                   help="how the crashing rank dies: raise RuntimeError (uncaught); raise the "
                        "same ValueError every time (a bug in the training code); a CUDA error "
                        "of a broken GPU; catch its error, tear down and sys.exit(1); "
                        "os._exit(1); SIGKILL (the OOM killer); a real segfault; abort(); "
                        "catch a CUDA error of a broken GPU and sys.exit(1); write a CUDA "
                        "error to stderr, then SIGKILL itself or os._exit(1)")
    p.add_argument("--crash-at", default="",
                   help="with --crash-rank: GEN:STEP,GEN:STEP,... crash in these generations "
                        "at these steps")
    p.add_argument("--exit-at", default="",
                   help="NODE:LOCAL_RANK:GEN:STEP:CODE,...: that rank calls sys.exit(CODE) at "
                        "the first step >= STEP of generation GEN, as Megatron-LM exits 16 "
                        "(restart elsewhere) or 17 (transient)")
    p.add_argument("--verdict-at", default="",
                   help="NODE:LOCAL_RANK:GEN:STEP:ACTION: that rank calls hb.verdict(ACTION) "
                        "then sys.exit(1) at that step")
    p.add_argument("--slow-rank", type=int, default=-1,
                   help="this rank's compute takes --slow-factor times longer")
    p.add_argument("--slow-factor", type=float, default=3.0)
    p.add_argument("--slow-node", default="",
                   help="every rank of this node (TRAINSUP_NODE) computes --slow-factor times "
                        "longer from --slow-step on")
    p.add_argument("--slow-step", type=int, default=0,
                   help="--slow-rank and --slow-node are slow from this step on")
    p.add_argument("--slow-data-node", default="",
                   help="a slow data loader on this node (TRAINSUP_NODE): each batch of its "
                        "ranks takes --slow-data-seconds longer to arrive")
    p.add_argument("--slow-data-seconds", type=float, default=0.1)
    p.add_argument("--slow-data-step", type=int, default=0,
                   help="--slow-data-node is slow from this step on")
    # The training signals (docs/signals.md).
    p.add_argument("--signals", default="",
                   help="the script's settings of the signal rules, as JSON (hb signals=)")
    p.add_argument("--label-noise", type=float, default=0.0,
                   help="noise on the labels: the loss levels off above 0 and stays noisy")
    p.add_argument("--nan-at", default="",
                   help="NODE:LOCAL_RANK:GEN:STEP: that rank's loss becomes NaN at that step "
                        "(the all-reduce then carries it to every rank)")
    p.add_argument("--digest-off-at", default="",
                   help="NODE:LOCAL_RANK:GEN:STEP: from that step that rank's replica digest "
                        "differs from its group's (silent data corruption)")
    p.add_argument("--leak-mb-per-step", type=float, default=0.0,
                   help="every rank keeps this many MB more each step (host RSS grows; the "
                        "bytes held are sent as device memory, of --device-capacity-mb)")
    p.add_argument("--device-capacity-mb", type=float, default=0.0)
    # The optimizer and its schedule, and a resume that misses part of them.
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    p.add_argument("--lr", type=float, default=0.01, help="the initial learning rate")
    p.add_argument("--lr-decay", type=float, default=1.0,
                   help="the LR scheduler multiplies the initial learning rate by this per step")
    p.add_argument("--resume-drop-optimizer", action="store_true",
                   help="at a resume, do not load the optimizer's state (Adam's moments start "
                        "over: the loss jumps)")
    p.add_argument("--resume-drop-scheduler", action="store_true",
                   help="at a resume, do not load the LR scheduler's state (the learning rate "
                        "starts over from --lr)")
    # Bad checkpoints and spike rollback (docs/recovery.md).
    p.add_argument("--poison-checkpoint", default="",
                   help="STEP:K:GEN: the checkpoint of step STEP that generation GEN saves gives "
                        "a NaN loss K steps after every load of it (Megatron-LM#5281); saved "
                        "again by another generation, it is sound")
    p.add_argument("--raise-on-nan", default="", choices=["", "after-report", "before-report"],
                   help="on a non-finite loss, raise FloatingPointError as Megatron-LM's check "
                        "of the loss does: after hb.step reported it, or before (the "
                        "supervisor then hears only of the crash)")
    p.add_argument("--bad-batches", default="",
                   help="FIRST:LAST: the batches of these steps have labels 100x too large (a "
                        "loss spike that lasts while the model recovers), unless skipped")
    # Kill criteria (docs/kill-criteria.md).
    p.add_argument("--kill-if", default="",
                   help="hb.kill_if's keyword arguments, as JSON")
    p.add_argument("--reference-curve", default="",
                   help='hb.reference_curve\'s keyword arguments, as JSON ({"points": '
                        '[[STEP, LOSS], ...], "band": 0.5, ...})')
    p.add_argument("--loss-rise-from", default="",
                   help="STEP:FACTOR: every rank reports its loss times FACTOR from that step "
                        "on (a run that has lost, against its reference curve)")
    return p.parse_args()


def crash(mode, rank, step):
    """Dies the way `mode` says (see --crash-mode)."""
    print(f"rank {rank}: injected {mode} at step {step}", flush=True)
    if mode == "value-error":
        raise ValueError(f"bad value in batch {step} of shard {rank}")
    if mode == "infra":
        raise RuntimeError("CUDA error: unspecified launch failure (injected on rank "
                           f"{rank} at step {step})")
    if mode == "sys-exit":
        # What most scripts do: catch, log, clean up, exit non-zero. No
        # exception reaches sys.excepthook, and the teardown takes a while
        # after the peers already saw the connection close.
        try:
            raise RuntimeError(f"injected failure on rank {rank} at step {step}")
        except RuntimeError as e:
            print(f"rank {rank}: {e}; exiting", flush=True)
            dist.destroy_process_group()
            sys.exit(1)
    if mode == "caught-infra":
        # The common way scripts end: catch, log, exit non-zero. The helper
        # still names the error it caught.
        try:
            raise RuntimeError("CUDA error: unspecified launch failure (injected on rank "
                               f"{rank} at step {step})")
        except RuntimeError as e:
            print(f"rank {rank}: {e}; exiting", file=sys.stderr, flush=True)
            sys.exit(1)
    if mode in ("infra-line-sigkill", "infra-line-os-exit"):
        # A rank that dies without a word, its last line on stderr a broken GPU's.
        print(f"RuntimeError: CUDA error: unspecified launch failure (injected on rank {rank} "
              f"at step {step})", file=sys.stderr, flush=True)
        time.sleep(0.5)  # torchrun copies it into its own stderr (--tee) meanwhile
        if mode == "infra-line-os-exit":
            os._exit(1)
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "os-exit":
        os._exit(1)
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "sigsegv":
        ctypes.string_at(0)  # a real segfault
    if mode == "sigabrt":
        os.abort()
    raise RuntimeError(f"injected crash on rank {rank} at step {step}")


def injected(generation_filter, step, at_step):
    return at_step >= 0 and step >= at_step and generation_filter in (-1, GENERATION)


def points(spec):
    """NODE:LOCAL_RANK:GEN:STEP:WHAT,... -> [(node, local rank, gen, step, what)]."""
    out = []
    for point in spec.split(","):
        if point:
            node, local_rank, gen, step, what = point.split(":")
            out.append((node, int(local_rank), int(gen), int(step), what))
    return out


def due_at(spec_points, local_rank, step):
    """The WHAT of the first point for this rank, generation and step, or None."""
    for node, at_rank, gen, at_step, what in spec_points:
        if node == NODE and at_rank == local_rank and gen == GENERATION and step >= at_step:
            return what
    return None


def injection(log, rank, step, what):
    """Logs an injected failure as it happens, so tests time what followed."""
    if log:
        log.write(json.dumps({"event": "injected", "what": what, "rank": rank, "step": step,
                              "node": NODE, "generation": GENERATION,
                              "time": time.time()}) + "\n")
        log.flush()


class Checkpointer:
    """Full training state in a directory, complete checkpoints only.

    Rank 0 writes the model and optimizer, every rank its own RNG and data
    position; after a barrier rank 0 moves `latest` to the new step. A
    checkpoint that did not complete on every rank is never resumed from.
    """

    def __init__(self, directory, rank):
        self.directory = directory
        self.rank = rank
        if directory:
            os.makedirs(directory, exist_ok=True)

    def _path(self, name):
        return os.path.join(self.directory, name)

    def _atomic_save(self, obj, name):
        tmp = self._path(f".{name}.{os.getpid()}.tmp")
        torch.save(obj, tmp)
        os.replace(tmp, self._path(name))

    def latest_step(self):
        try:
            with open(self._path("latest")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def complete_steps(self):
        """The steps of every checkpoint that completed on every rank."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        return sorted(int(n[len("done-"):]) for n in names
                      if n.startswith("done-") and n[len("done-"):].isdigit())

    def resume_step(self, limit):
        """The checkpoint to resume from: the latest, or with a limit (the
        supervisor's hb.resume_limit()) the newest complete one at or below it."""
        if limit is None:
            return self.latest_step()
        below = [s for s in self.complete_steps() if s <= limit]
        return max(below) if below else None

    def save(self, step, model, optimizer, scheduler, gen, poison=None):
        if self.rank == 0:
            state = {"step": step, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(),
                     "scheduler": scheduler.state_dict()}
            if poison is not None:
                state["poison"] = poison
            self._atomic_save(state, f"model-{step}.pt")
        self._atomic_save({"step": step, "generator": gen.get_state(),
                           "python_random": random.getstate()}, f"rank{self.rank}-{step}.pt")
        dist.barrier()
        if self.rank == 0:
            tmp = self._path(".latest.tmp")
            with open(tmp, "w") as f:
                f.write(str(step))
            os.replace(tmp, self._path("latest"))
            open(self._path(f"done-{step}"), "w").close()
        dist.barrier()

    def load(self, step, model, optimizer, scheduler, gen, drop=()):
        """Loads the checkpoint of `step`, but for the parts named in `drop`
        ("optimizer", "scheduler"): a checkpoint restored incompletely.
        Returns the checkpoint's poison (steps to a NaN), if any."""
        state = torch.load(self._path(f"model-{step}.pt"))
        model.load_state_dict(state["model"])
        if "optimizer" not in drop:
            optimizer.load_state_dict(state["optimizer"])
        if "scheduler" not in drop:
            scheduler.load_state_dict(state["scheduler"])
        # The learning rate the next step uses is the scheduler's.
        for group, lr in zip(optimizer.param_groups, scheduler.get_last_lr()):
            group["lr"] = lr
        own = self._path(f"rank{self.rank}-{step}.pt")
        if os.path.exists(own):
            mine = torch.load(own)
            gen.set_state(mine["generator"])
            random.setstate(mine["python_random"])
        else:  # a rank that did not exist before (the world grew): a fresh stream
            gen.manual_seed(1000 * step + self.rank)
        return state.get("poison")


def emulate_flight_recorder(dumps, rank):
    """torch's ProcessGroupNCCL DumpPipe and DebugInfoWriter, for a gloo job
    (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp): only when the buffer
    size is above 0 and the pipe's name is set, as torch does."""
    import shutil
    import threading
    pipe_prefix = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "")
    if not pipe_prefix or int(os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")) <= 0:
        return
    pipe = f"{pipe_prefix}{rank}.pipe"
    try:
        os.unlink(pipe)
    except FileNotFoundError:
        pass
    os.mkfifo(pipe, 0o666)
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    target = os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/tmp/nccl_trace_rank_") + str(rank)
    source = os.path.join(dumps, f"hang_rank{rank}.pkl")

    def watchdog():
        while True:
            try:
                poked = os.read(fd, 128)
            except BlockingIOError:
                poked = b""
            if poked and os.path.exists(source):
                shutil.copyfile(source, target + ".tmp")
                os.replace(target + ".tmp", target)
            time.sleep(0.1)  # torch's monitor thread polls its pipe on a timer too

    threading.Thread(target=watchdog, daemon=True).start()


def reached(spec, local_rank, step):
    """Whether this rank is at or past a NODE:LOCAL_RANK:GEN:STEP point of
    `spec` (comma-separated) in this generation."""
    return due_at(points(",".join(p + ":due" for p in spec.split(",") if p)),
                  local_rank, step) is not None


def main():
    args = parse_args()
    capacity = int(args.device_capacity_mb * 2**20) or None
    # Before the rendezvous: the agent sees the rank come up.
    hb = trainsup.Heartbeat(signals=json.loads(args.signals) if args.signals else None,
                            device_memory_capacity_bytes=capacity)
    if args.kill_if:
        hb.kill_if(**json.loads(args.kill_if))
    if args.reference_curve:
        hb.reference_curve(**json.loads(args.reference_curve))
    rise_step, rise_factor = (int(args.loss_rise_from.split(":")[0]),
                              float(args.loss_rise_from.split(":")[1])) \
        if args.loss_rise_from else (None, 1.0)
    if args.teardown_seconds:
        # Registered after the helper's own handler, so run before it: the
        # EXIT went out with sys.exit, before any atexit handler.
        atexit.register(time.sleep, args.teardown_seconds)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
    rank = dist.get_rank()
    world = dist.get_world_size()
    if args.emulate_flight_recorder:
        emulate_flight_recorder(args.emulate_flight_recorder, rank)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.manual_seed(1234)  # the same initial model on every rank
    model = torch.nn.Linear(32, 1)
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer,
                                                  lambda epoch: args.lr_decay ** epoch)
    gen = torch.Generator().manual_seed(rank)
    random.seed(rank)
    checkpointer = Checkpointer(args.checkpoint_dir, rank)
    start = 0
    # Where the supervisor wants the job to resume (None: as the script likes).
    resume_limit = hb.resume_limit()
    skip = hb.skip_range()
    resumed_from = checkpointer.resume_step(resume_limit) if args.checkpoint_dir else None
    nan_from = None  # a poisoned checkpoint's NaN step
    dropped = [part for part, flag in (("optimizer", args.resume_drop_optimizer),
                                       ("scheduler", args.resume_drop_scheduler)) if flag]
    if resumed_from is not None:
        poison = checkpointer.load(resumed_from, model, optimizer, scheduler, gen, drop=dropped)
        start = resumed_from + 1
        if poison is not None:
            nan_from = resumed_from + poison
    poison_step, poison_k, poison_gen = (
        (int(v) for v in args.poison_checkpoint.split(":")) if args.poison_checkpoint
        else (-1, 0, -1))
    bad_first, bad_last = ((int(v) for v in args.bad_batches.split(":")) if args.bad_batches
                           else (-1, -2))
    crash_points = [tuple(int(v) for v in point.split(":"))
                    for point in args.crash_at.split(",") if point]
    exit_points = points(args.exit_at)
    verdict_points = points(args.verdict_at)
    log = open(args.log, "a", buffering=1) if args.log else None
    if log:
        log.write(json.dumps({"event": "start", "rank": rank, "world_size": world,
                              "generation": GENERATION, "node": NODE,
                              "resumed_from": resumed_from, "resume_limit": resume_limit,
                              "skip_range": skip}) + "\n")

    held = []  # what --leak-mb-per-step keeps
    logged = set()

    def inject_once(what, step):
        if what not in logged:
            logged.add(what)
            injection(log, rank, step, what)

    if resumed_from is not None:
        for part in dropped:
            inject_once(f"{part} state dropped", start)

    for step in range(start, args.steps):
        # The batch arrives before the rank's own work begins (as the
        # helper's example has it): its wait is data wait, not compute.
        t0 = time.monotonic()
        wait = args.data_wait_seconds
        if args.slow_data_node and NODE == args.slow_data_node and step >= args.slow_data_step:
            if step == max(start, args.slow_data_step):
                injection(log, rank, step, "slow data")
            wait += args.slow_data_seconds
        if wait:
            time.sleep(wait)
        x = torch.randn(64, 32, generator=gen)
        y = x.sum(dim=1, keepdim=True)
        if args.label_noise:
            y = y + args.label_noise * torch.randn(y.shape, generator=gen)
        data_wait = time.monotonic() - t0
        if skip is not None and skip[0] <= step <= skip[1]:
            # The supervisor's skip range: the batch is drawn (the data
            # position moves on) and not trained on.
            inject_once("skipped", step)
            hb.step(step, data_wait_s=data_wait)
            continue
        if bad_first <= step <= bad_last:
            inject_once("bad batch", step)
            y = y * 100.0
        with hb.compute():
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            if reached(args.nan_at, local_rank, step):
                inject_once("nan", step)
                loss = loss * float("nan")
            if nan_from is not None and step >= nan_from:
                inject_once("poisoned checkpoint", step)
                loss = loss * float("nan")
            loss.backward()
            slow_node = NODE == args.slow_node and step >= args.slow_step
            slow = slow_node or (rank == args.slow_rank and step >= args.slow_step)
            if slow_node:
                inject_once("slow node", step)
            elif slow and step == max(start, args.slow_step):
                injection(log, rank, step, "slow compute")
            work = args.step_seconds * (args.slow_factor if slow else 1.0)
            if args.leak_mb_per_step:
                held.append(b"\x01" * int(args.leak_mb_per_step * 2**20))
            time.sleep(work)
            crash_here = rank == args.crash_rank or (
                NODE == args.crash_node and local_rank == args.crash_local_rank)
            crash_now = injected(args.crash_generation, step, args.crash_step) or any(
                injected(g, step, s) for g, s in crash_points)
            if crash_here and crash_now:
                injection(log, rank, step, args.crash_mode)
                crash(args.crash_mode, rank, step)
            code = due_at(exit_points, local_rank, step)
            if code is not None:
                injection(log, rank, step, f"exit {code}")
                sys.exit(int(code))
            action = due_at(verdict_points, local_rank, step)
            if action is not None:
                injection(log, rank, step, f"verdict {action}")
                hb.verdict(action, f"injected on rank {rank} at step {step}")
                sys.exit(1)
            hang_here = rank == args.hang_rank or (
                NODE == args.hang_node and local_rank == args.hang_local_rank)
            if hang_here and (injected(args.hang_generation, step, args.hang_step) or
                              (args.hang_file and os.path.exists(args.hang_file))):
                print(f"rank {rank}: hanging before the all-reduce of step {step}", flush=True)
                injection(log, rank, step, "hang")
                while True:
                    time.sleep(3600)
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        lr = optimizer.param_groups[0]["lr"]  # the one this step used
        optimizer.step()
        scheduler.step()
        # The all-reduced gradients are the same on every rank: their norm is
        # the replica digest, sent while finite (NaN has many bit patterns).
        grad_norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in model.parameters())).item()
        digest = grad_norm if grad_norm == grad_norm and grad_norm != float("inf") else None
        if digest is not None and reached(args.digest_off_at, local_rank, step):
            inject_once("digest off", step)
            digest += 1.0
        memory = {}
        if args.leak_mb_per_step or capacity:
            memory["device_memory_bytes"] = sum(len(b) for b in held)
        reported = loss.item()
        if rise_step is not None and step >= rise_step:
            inject_once("loss rise", step)
            reported *= rise_factor
        if args.raise_on_nan == "before-report" and not math.isfinite(reported):
            raise FloatingPointError(f"Rank {rank}: found NaN in local forward loss "
                                     f"calculation at step {step}")
        hb.step(step, data_wait_s=data_wait, loss=reported, lr=lr, samples=64,
                grad_norm=grad_norm, replica_digest=digest, **memory)
        if log:
            log.write(json.dumps({"rank": rank, "step": step, "pid": os.getpid(), "node": NODE,
                                  "local_rank": local_rank,
                                  "generation": GENERATION, "world_size": world,
                                  "loss": reported, "lr": lr, "time": time.time()}) + "\n")
        if args.raise_on_nan == "after-report" and not math.isfinite(reported):
            raise FloatingPointError(f"Rank {rank}: found NaN in local forward loss "
                                     f"calculation at step {step}")
        if args.planned_checkpoints:
            due = hb.should_checkpoint(step)
        else:
            due = args.checkpoint_every and (step + 1) % args.checkpoint_every == 0
        if due:
            poison = poison_k if (step, GENERATION) == (poison_step, poison_gen) else None
            try:
                with hb.checkpointing(step):
                    if 0 <= args.checkpoint_fail_from <= step:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    checkpointer.save(step, model, optimizer, scheduler, gen, poison)
                    time.sleep(args.checkpoint_extra_seconds)
            except OSError as e:
                if args.checkpoint_fail_from < 0:
                    raise  # a real one: not this script's to hide
                injection(log, rank, step, f"checkpoint save failed: {e}")
                continue
            if log:
                log.write(json.dumps({"event": "checkpoint", "rank": rank, "step": step,
                                      "generation": GENERATION, "time": time.time()}) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
