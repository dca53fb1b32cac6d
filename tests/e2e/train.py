"""A small data-parallel training job (gloo on CPU) that uses the trainsup helper.

Run by torchrun under trainsup-agent in the end-to-end tests and the demo. It
can inject the failures trainsup must see: a hang before the all-reduce, a
crash, a straggling rank. Every rank appends one JSON line per completed step
to --log (if given), so tests can check what the job itself did.
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


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=100, help="steps to train")
    p.add_argument("--step-seconds", type=float, default=0.05,
                   help="simulated compute per step, seconds")
    p.add_argument("--hang-rank", type=int, default=-1,
                   help="this rank stops before its all-reduce at --hang-step and never returns")
    p.add_argument("--hang-step", type=int, default=-1)
    p.add_argument("--crash-rank", type=int, default=-1,
                   help="this rank raises at --crash-step (uncaught: exit code 1)")
    p.add_argument("--crash-step", type=int, default=-1)
    p.add_argument("--slow-rank", type=int, default=-1,
                   help="this rank's compute takes --slow-factor times longer")
    p.add_argument("--slow-factor", type=float, default=3.0)
    p.add_argument("--pg-timeout", type=float, default=1800.0,
                   help="process-group (collective) timeout, seconds; torch's default is 1800")
    p.add_argument("--log", default="", help="append one JSON line per step and rank here")
    return p.parse_args()


def main():
    args = parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.manual_seed(1234)  # the same initial model on every rank
    model = torch.nn.Linear(32, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    hb = trainsup.Heartbeat()
    gen = torch.Generator().manual_seed(rank)
    log = open(args.log, "a", buffering=1) if args.log else None

    for step in range(args.steps):
        with hb.compute():
            t0 = time.monotonic()
            x = torch.randn(64, 32, generator=gen)
            y = x.sum(dim=1, keepdim=True)
            data_wait = time.monotonic() - t0
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            work = args.step_seconds * (args.slow_factor if rank == args.slow_rank else 1.0)
            time.sleep(work)
            if rank == args.crash_rank and step == args.crash_step:
                raise RuntimeError(f"injected crash on rank {rank} at step {step}")
            if rank == args.hang_rank and step == args.hang_step:
                print(f"rank {rank}: hanging before the all-reduce of step {step}", flush=True)
                while True:
                    time.sleep(3600)
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        optimizer.step()
        hb.step(step, data_wait_s=data_wait, loss=loss.item(), lr=0.01, samples=64)
        if log:
            log.write(json.dumps({"rank": rank, "step": step, "pid": os.getpid(),
                                  "node": os.environ.get("TRAINSUP_NODE", ""),
                                  "loss": loss.item()}) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
