"""The job of scripts/gpu-check.sh: real CUDA tensors, a hang, a restart.

Run by torchrun (`--standalone --nproc_per_node=N`) under trainsup-agent. Each
rank binds cuda:LOCAL_RANK, multiplies a matrix there (the rank's own work,
inside hb.compute()) and all-reduces a CUDA tensor every step: with NCCL when
the job has two ranks or more, with gloo on CUDA tensors when it has one (NCCL
is for GPU to GPU; gloo moves a CUDA tensor through the host). The all-reduce's
result is checked, so that a collective that returns garbage fails the job
rather than passing the check. Each step is a heartbeat (hb.step).

In generation --hang-generation (TRAINSUP_GENERATION, which the agent sets)
the rank --hang-rank stops before its all-reduce at --hang-step and sleeps
forever, as a rank wedged in a kernel or a data loader would: the other ranks
wait in the collective, and only trainsupd's stall detection ends it. The next
generation trains to the end and exits 0.

Every rank appends JSON lines to --log (its start, with the GPU it bound;
its first step; the hang; its end) for gpu-check.sh to read back.

Standard library, torch, and the trainsup helper (PYTHONPATH=agent/python).
"""

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import trainsup

GENERATION = int(os.environ.get("TRAINSUP_GENERATION", "0"))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40, help="steps per generation (default 40)")
    p.add_argument("--step-seconds", type=float, default=0.1,
                   help="the least time a step takes (default 0.1): a GPU does the step's "
                        "work in milliseconds, and a step this long keeps the job in "
                        "view for the few seconds detection needs")
    p.add_argument("--hang-step", type=int, default=20, help="the step the hang happens at")
    p.add_argument("--hang-rank", type=int, default=-1,
                   help="the rank that hangs (default: the last one)")
    p.add_argument("--hang-generation", type=int, default=1,
                   help="the generation the hang happens in (default 1; 0: none)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cuda (default); cpu only to try gpu-check.sh itself on a machine "
                        "without a GPU (gloo on CPU tensors: not a check of any GPU)")
    p.add_argument("--log", default="", help="append this rank's JSON lines here")
    return p.parse_args()


def pci_address(properties):
    """The bound GPU's PCI address as the kernel log writes it ("0000:3b:00"),
    or None where this torch does not say (the properties gained pci_* fields
    in torch 2.x)."""
    try:
        return "%04x:%02x:%02x" % (properties.pci_domain_id, properties.pci_bus_id,
                                   properties.pci_device_id)
    except AttributeError:
        return None


class RankLog:
    """This rank's JSON lines, each with the rank, the generation and the time."""

    def __init__(self, path, rank):
        self.file = open(path, "a", buffering=1) if path else None
        self.rank = rank

    def write(self, event, **fields):
        if self.file:
            self.file.write(json.dumps({"event": event, "rank": self.rank,
                                        "generation": GENERATION, "time": time.time(),
                                        **fields}) + "\n")


def main():
    args = parse_args()
    # Before the rendezvous: the agent sees the rank come up.
    hb = trainsup.Heartbeat()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.device == "cuda":
        # The rank's GPU before the process group: NCCL binds its
        # communicator to the current device.
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl" if world >= 2 else "gloo"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    # 30 minutes whatever this torch's default (10 for NCCL in some
    # versions): the hang must be ended by trainsupd, never by torch's timeout.
    dist.init_process_group(backend, timeout=datetime.timedelta(minutes=30))
    rank = dist.get_rank()
    log = RankLog(args.log, rank)
    gpu = {}
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        gpu = {"gpu_name": properties.name, "gpu_pci": pci_address(properties)}
    log.write("start", local_rank=local_rank, world_size=world, backend=backend,
              device=str(device), torch=torch.__version__, cuda=torch.version.cuda, **gpu)
    hang_rank = args.hang_rank if args.hang_rank >= 0 else world - 1

    generator = torch.Generator(device=device).manual_seed(rank)
    weights = torch.randn(256, 256, device=device, generator=generator) / 16
    expected = world * (world + 1) / 2  # the sum of every rank's rank + 1
    for step in range(args.steps):
        began = time.monotonic()
        with hb.compute():
            activations = torch.randn(256, 256, device=device, generator=generator)
            for _ in range(8):
                activations = torch.tanh(activations @ weights)
            loss = activations.pow(2).mean()
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # the work is done, not just queued
            time.sleep(max(0.0, args.step_seconds - (time.monotonic() - began)))
            # Inside its own work, as a rank stuck in a kernel or its data
            # loader is: trainsupd tells it from the ranks that finished
            # theirs and wait in the all-reduce, and names it.
            if (GENERATION == args.hang_generation and rank == hang_rank
                    and step >= args.hang_step):
                log.write("hang", step=step)
                print(f"rank {rank}: hanging before the all-reduce of step {step} "
                      f"(generation {GENERATION})", flush=True)
                while True:
                    time.sleep(3600)
        reduced = torch.full((1024,), float(rank + 1), device=device)
        dist.all_reduce(reduced)
        got = reduced.cpu()
        if not torch.all(got == expected):
            raise RuntimeError(f"rank {rank}: {backend} all-reduce of step {step} on "
                               f"{device} gave {got[:4].tolist()}..., not {expected}")
        hb.step(step, loss=loss.item())
        if step == 0:
            log.write("first_step", step=step)
    # The end together: the last all-reduce was every rank's (.cpu() waits
    # for it: NCCL's returns once queued).
    ended = torch.zeros(1, device=device)
    dist.all_reduce(ended)
    ended.cpu()
    log.write("end", steps=args.steps)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
