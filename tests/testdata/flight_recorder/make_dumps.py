#!/usr/bin/env python3
"""Writes the NCCL flight recorder dumps of this directory (README.md).

The dumps are built in the documented format and pickled the way torch's C++
pickler does (torch/csrc/jit/serialization/pickler.cpp, called by
FlightRecorder::dump through pickle_str): PROTO 2; every string as
BINUNICODE followed by a BINPUT, a repeated string as a BINGET of it; a dict
as EMPTY_DICT MARK ... SETITEMS and a list as EMPTY_LIST MARK ... APPENDS,
however few their items; tuples as TUPLE1-3 or MARK ... TUPLE; integers as
BININT1, BININT2, BININT or an 8-byte LONG1; floats as BINFLOAT; a value
shared with another place (the stack frames, held by the recorder's list of
all frames too) memoized after it is built and fetched again with BINGET.
Every dump is checked to load with Python's pickle to the same object.

Two more are written by Python's own pickler (protocols 2 and 4), as a tool
that loaded and saved a dump again would: APPEND, SETITEM, SHORT_BINUNICODE,
MEMOIZE and FRAME appear there, and containers are memoized before they are
filled.

Usage: python3 make_dumps.py  (writes next to this script; deterministic)
"""

import os
import pickle
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# Opcodes torch's pickler writes.
PROTO, STOP, MARK = b"\x80", b".", b"("
EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE = b"}", b"]", b")"
SETITEMS, APPENDS, TUPLE = b"u", b"e", b"t"
TUPLE1, TUPLE2, TUPLE3 = b"\x85", b"\x86", b"\x87"
BINUNICODE, BININT, BININT1, BININT2, LONG1 = b"X", b"J", b"K", b"M", b"\x8a"
NEWTRUE, NEWFALSE, NONE, BINFLOAT = b"\x88", b"\x89", b"N", b"G"
BINPUT, LONG_BINPUT, BINGET, LONG_BINGET = b"q", b"r", b"h", b"j"


class TorchStylePickler:
    """What torch::jit::Pickler writes for the IValues of a dump."""

    def __init__(self, shared_ids):
        self.out = bytearray()
        self.memo_id = 0
        self.strings = {}  # memoized by value, as pushString does
        self.shared = {}  # memoized by identity, as pushIValue does for use_count > 1
        self.shared_ids = shared_ids

    def dumps(self, obj):
        self.out += PROTO + bytes([2])
        self.push(obj)
        self.out += STOP
        return bytes(self.out)

    def next_binput(self):
        if self.memo_id <= 255:
            self.out += BINPUT + bytes([self.memo_id])
        else:
            self.out += LONG_BINPUT + struct.pack("<I", self.memo_id)
        self.memo_id += 1
        return self.memo_id - 1

    def binget(self, memo_id):
        if memo_id <= 255:
            self.out += BINGET + bytes([memo_id])
        else:
            self.out += LONG_BINGET + struct.pack("<I", memo_id)

    def push(self, obj):
        if id(obj) in self.shared_ids:
            if id(obj) in self.shared:
                self.binget(self.shared[id(obj)])
                return
            self.push_impl(obj)
            self.shared[id(obj)] = self.next_binput()
        else:
            self.push_impl(obj)

    def push_impl(self, obj):
        if obj is None:
            self.out += NONE
        elif isinstance(obj, bool):
            self.out += NEWTRUE if obj else NEWFALSE
        elif isinstance(obj, int):
            if 0 <= obj <= 0xFF:
                self.out += BININT1 + struct.pack("<B", obj)
            elif 0 <= obj <= 0xFFFF:
                self.out += BININT2 + struct.pack("<H", obj)
            elif -(2**31) <= obj < 2**31:
                self.out += BININT + struct.pack("<i", obj)
            else:
                self.out += LONG1 + bytes([8]) + struct.pack("<q", obj)
        elif isinstance(obj, float):
            self.out += BINFLOAT + struct.pack(">d", obj)
        elif isinstance(obj, str):
            if obj in self.strings:
                self.binget(self.strings[obj])
            else:
                data = obj.encode("utf-8")
                self.out += BINUNICODE + struct.pack("<I", len(data)) + data
                self.strings[obj] = self.next_binput()
        elif isinstance(obj, dict):
            self.out += EMPTY_DICT + MARK
            for key, value in obj.items():
                self.push(key)
                self.push(value)
            self.out += SETITEMS
        elif isinstance(obj, list):
            self.out += EMPTY_LIST + MARK
            for item in obj:
                self.push(item)
            self.out += APPENDS
        elif isinstance(obj, tuple):
            if len(obj) == 0:
                self.out += EMPTY_TUPLE
            elif len(obj) <= 3:
                for item in obj:
                    self.push(item)
                self.out += (TUPLE1, TUPLE2, TUPLE3)[len(obj) - 1]
            else:
                self.out += MARK
                for item in obj:
                    self.push(item)
                self.out += TUPLE
        else:
            raise TypeError(type(obj))


# The recorder's frames: one dict per distinct frame, shared by every entry
# whose stack holds it.
FRAMES = {
    name: {"name": name, "filename": filename, "line": line}
    for name, filename, line in [
        ("all_reduce", "torch/distributed/distributed_c10d.py", 2806),
        ("broadcast", "torch/distributed/distributed_c10d.py", 2689),
        ("all_gather_into_tensor", "torch/distributed/distributed_c10d.py", 3711),
        ("send", "torch/distributed/distributed_c10d.py", 2324),
        ("recv", "torch/distributed/distributed_c10d.py", 2380),
        ("wrapper", "torch/distributed/c10d_logger.py", 81),
        ("train_step", "train.py", 88),
        ("main", "train.py", 131),
        ("<module>", "train.py", 140),
    ]
}
SHARED_IDS = {id(f) for f in FRAMES.values()}

T0_NS = 1764720000_000_000_000  # 2025-12-03T00:00:00Z
TIMEOUT_MS = 600000


def frames_of(op):
    call = op.split(" ")[0]
    return [FRAMES[call], FRAMES["wrapper"], FRAMES["train_step"], FRAMES["main"],
            FRAMES["<module>"]]


def entry(version, record_id, pg, op, coll_seq, p2p_seq, op_id, state, is_p2p=False,
          sizes=((1024, 1024),), timing=False, retired=None, thread_id=140245032817472):
    """One entry, its keys in the writer's order (getCollectiveTrace)."""
    pg_id, pg_name, pg_desc = pg
    created = T0_NS + record_id * 250_000_000
    started = created + 1_000_000 if timing and state in ("started", "completed") else None
    completed = created + 5_000_000 if state == "completed" else None
    e = {"frames": frames_of(op), "record_id": record_id, "pg_id": pg_id,
         "process_group": (pg_name, pg_desc)}
    if version == "2.10":
        e["thread_name"] = "pt_main_thread"
        e["thread_id"] = str(thread_id)
    e.update({"collective_seq_id": coll_seq, "p2p_seq_id": p2p_seq, "op_id": op_id,
              "profiling_name": f"nccl:{op}", "time_created_ns": created})
    if timing and state == "completed":
        e["duration_ms"] = 3.75
    full = version == "2.10"
    e["input_sizes"] = [list(s) for s in sizes]
    if full:
        e["input_dtypes"] = ["Float"] * len(sizes)
    e["output_sizes"] = [list(s) for s in sizes]
    if full:
        e["output_dtypes"] = ["Float"] * len(sizes)
    e.update({"state": state, "time_discovered_started_ns": started,
              "time_discovered_completed_ns": completed,
              "retired": state == "completed" if retired is None else retired})
    if full:
        e["timeout_ms"] = TIMEOUT_MS
        e["is_p2p"] = is_p2p
    return e


def dump(version, pg_config, pg_status, entries):
    """The dict FlightRecorder::dump pickles, its keys in the writer's order."""
    d = {"version": version, "pg_config": pg_config}
    if version == "2.10":
        d["comm_lib_version"] = "2.21.5"
    d["pg_status"] = pg_status
    d["entries"] = entries
    return d


def config(*groups):
    return {name: {"name": name, "desc": desc, "ranks": "[" + ", ".join(map(str, ranks)) + "]"}
            for name, desc, ranks in groups}


def status(**by_pg):
    return {pg_id: {"last_enqueued_collective": enq, "last_started_collective": start,
                    "last_completed_collective": done}
            for pg_id, (enq, start, done) in by_pg.items()}


DEFAULT_PG = (0, "0", "default_pg")
WORLD4 = ("0", "default_pg", [0, 1, 2, 3])


def collectives(version, last_completed, pending=None, timing=False):
    """Seq 1 a broadcast of the parameters, then all_reduces; `pending`: the
    state of one more, enqueued and not completed."""
    out = []
    for seq in range(1, last_completed + 1):
        op = "broadcast" if seq == 1 else "all_reduce"
        out.append(entry(version, seq - 1, DEFAULT_PG, op, seq, 0, seq, "completed",
                         timing=timing))
    if pending:
        seq = last_completed + 1
        out.append(entry(version, seq - 1, DEFAULT_PG, "all_reduce", seq, 0, seq, pending,
                         timing=timing))
    return out


def hang(rank):
    """A 4-rank job in which rank 2 never entered all_reduce #7 of the
    default group: ranks 0, 1 and 3 enqueued it and wait (timing off, as by
    default: "scheduled", and pg_status says -1 for started)."""
    if rank == 2:
        return dump("2.10", config(WORLD4), status(**{"0": (6, -1, 6)}),
                    collectives("2.10", 6))
    return dump("2.10", config(WORLD4), status(**{"0": (7, -1, 6)}),
                collectives("2.10", 6, pending="scheduled"))


def healthy(rank):
    """The same job dumped on demand with every rank past all_reduce #7."""
    return dump("2.10", config(WORLD4), status(**{"0": (7, -1, 7)}), collectives("2.10", 7))


def version_2_2():
    """Rank 0 of a 2-rank job with timing on (TORCH_NCCL_ENABLE_TIMING=1):
    all_reduce #4 started, not completed. The keys are a conservative subset
    (README.md): no input_dtypes, output_dtypes, timeout_ms or is_p2p."""
    d = dump("2.2", config(("0", "default_pg", [0, 1])), status(**{"0": (4, 4, 3)}),
             collectives("2.2", 3, pending="started", timing=True))
    return d


def p2p(rank):
    """Two pipeline stages: the default group all-reduces (#1, #2, done) and
    group 1 ("pp") carries the activations, rank 0 sending to rank 1. Rank 0's
    third send waits; rank 1 never posted its third receive. pg_status
    numbers each group's last work with that work's own counter, so group 1's
    last_enqueued_collective is rank 0's p2p count (3) while no collective of
    group 1 exists: it must not be read as collective #3."""
    pp = (1, "1", "pp")
    out = collectives("2.10", 2)
    record_id = len(out)
    last = 3 if rank == 0 else 2
    for p2p_seq in range(1, last + 1):
        op = "send 0->1" if rank == 0 else "recv 1<-0"
        state = "completed" if p2p_seq < 3 else "scheduled"
        out.append(entry("2.10", record_id, pp, op, 0, p2p_seq, len(out) + 1, state,
                         is_p2p=True, sizes=((8, 4096, 1024),)))
        record_id += 1
    pp_status = (3, -1, 2) if rank == 0 else (2, -1, 2)
    return dump("2.10", config(("0", "default_pg", [0, 1]), ("1", "pp", [0, 1])),
                status(**{"0": (2, -1, 2), "1": pp_status}), out)


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def torch_style(obj):
    data = TorchStylePickler(SHARED_IDS).dumps(obj)
    assert pickle.loads(data) == obj, "the torch-style pickle does not load back"
    return data


def main():
    for rank in range(4):
        write(f"hang_rank{rank}.pkl", torch_style(hang(rank)))
        write(f"healthy_rank{rank}.pkl", torch_style(healthy(rank)))
    write("version_2_2_rank0.pkl", torch_style(version_2_2()))
    for rank in range(2):
        write(f"p2p_rank{rank}.pkl", torch_style(p2p(rank)))
    write("python_protocol2_rank0.pkl", pickle.dumps(hang(0), protocol=2))
    write("python_protocol4_rank0.pkl", pickle.dumps(hang(0), protocol=4))
    whole = torch_style(hang(0))
    write("truncated_rank0.pkl", whole[: len(whole) // 2])


if __name__ == "__main__":
    main()
