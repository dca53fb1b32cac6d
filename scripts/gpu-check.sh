#!/usr/bin/env bash
# What trainsup sees of this machine's NVIDIA GPUs, and a short job under
# trainsup on them (issue 32, item 8). From a clone:
#
#   bash scripts/gpu-check.sh
#
# Each check prints one line, `CHECK: OK: ...`, `CHECK: could not check: WHY`
# or `CHECK: FAILED: WHY`, details indented below it:
#   nvidia-smi   nvidia-smi --query-gpu=index,pci.bus_id,uuid,serial, the agent's
#                own question, and the map it makes of it: which local rank uses
#                which GPU (docs/gpu.md, "Which GPU, which ranks")
#   GPU health   nvidia-smi -q -d PERFORMANCE,ROW_REMAPPER, as the agent reads it:
#                a GPU whose clocks are slowed (power cap, thermal or hardware
#                slowdown, power brake) or with a row remap pending fails
#   kernel log   whether this user may read /dev/kmsg (the agent's default
#                --kernel-log, where the driver's Xid lines arrive)
#   Xid history  the Xid lines already in dmesg: printed, history, no failure
#   torch        torch.cuda.is_available() and device_count() of the python
#                the job runs with
#   NCCL         torch.distributed.is_nccl_available()
#   job          trainsupd on loopback and one trainsup-agent (the real
#                nvidia-smi, the default kernel log) wrapping `torchrun
#                --standalone --nproc_per_node=N` (N: the GPUs, at most 8) of
#                scripts/gpu_check_train.py: an all-reduce of CUDA tensors each
#                step (NCCL; gloo with one GPU); in generation 1 the last rank
#                hangs at step 20; trainsupd must report the stall naming it,
#                restart the job, and generation 2 must run its 40 steps and
#                end the job with exit 0
#   GPU binding  the GPU each rank bound (cuda:LOCAL_RANK) against the GPU the
#                agent maps that local rank to (an Xid names its ranks so)
#
# Exit codes: 0 every check that could run passed; 1 a check failed; 2 no
# NVIDIA GPU here, or none usable (no nvidia-smi, none listed, or
# torch.cuda not available): the checks that need none ran, the job did not,
# and a failure among them is listed in the summary.
#
# Everything it starts runs in a process group of its own and is ended at its
# exit, however it exits; the logs stay in the directory it names at the end.
#
# Environment:
#   PYTHON        the python with torch the job runs with (default: python3 on
#                 PATH if it imports torch, else /usr/bin/python3, where
#                 Debian's python3-torch is)
#   TRAINSUPD, TRAINSUP_AGENT, TRAINSUPCTL
#                 the binaries (default: build/; when those are missing, they
#                 are built as scripts/demo.sh does)
#   TRAINSUP_GPU_CHECK_CPU_RANKS=N
#                 where no GPU is usable, run the job anyway on CPU with N ranks
#                 (gloo): it tries this script itself, and checks no GPU (the
#                 exit code stays 2)
#
# Functions called from traps and wait_for look unreachable to shellcheck.
# shellcheck disable=SC2317
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

JOB=gpu-check
STEPS=40
HANG_STEP=20
# What the end-to-end tests use (FAST in tests/e2e/test_gpu.py): the job
# takes seconds, not the minutes trainsupd's defaults for real jobs allow.
SUPERVISOR_ARGS=(--stall-floor 5s --sweep-interval 250ms --restart-backoff 1s --stop-grace 3s)
# Deadlines (seconds). CUDA and NCCL set up in seconds, on 8 GPUs in tens.
START_DEADLINE=240
HANG_DEADLINE=120
STALL_DEADLINE=60
RECOVERY_DEADLINE=240
END_DEADLINE=180

WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/trainsup-gpu-check.XXXXXX")
SMI_CSV=$WORKDIR/nvidia-smi-query-gpu.csv
RANK_LOG=$WORKDIR/ranks.jsonl

# -- what was checked ---------------------------------------------------------

checks_ok=()
checks_failed=()
checks_skipped=()

# verdict CHECK ok|skip|fail MESSAGE: the check's one line, and its tally.
verdict() {
  local check=$1 outcome=$2 message=$3
  case "$outcome" in
    ok) echo "$check: OK: $message"; checks_ok+=("$check") ;;
    skip) echo "$check: could not check: $message"; checks_skipped+=("$check ($message)") ;;
    fail) echo "$check: FAILED: $message"; checks_failed+=("$check ($message)") ;;
  esac
}

indent() { sed 's/^/    /'; }

# -- the processes it starts --------------------------------------------------

started_pids=()

# start LOG COMMAND...: COMMAND in the background in a session (and process
# group) of its own, so that the terminal's ^C reaches only this script, which
# then ends it in order. The variable TRAINSUP_GPU_CHECK_RUN marks it and
# everything it starts, to be found at cleanup even if it was reparented.
start() {
  local log=$1
  shift
  TRAINSUP_GPU_CHECK_RUN=$WORKDIR setsid "$@" </dev/null >"$log" 2>&1 &
  started_pids+=("$!")
}

# Whether process $1 runs (a zombie has ended).
alive() {
  local stat
  kill -0 "$1" 2>/dev/null || return 1
  read -r stat <"/proc/$1/stat" 2>/dev/null || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

# The processes this run started, its own helpers aside: those whose
# environment holds the mark (read with builtins only, which start nothing).
marked_pids() {
  local environ entry pid
  for environ in /proc/[0-9]*/environ; do
    pid=${environ#/proc/}
    pid=${pid%/environ}
    while IFS= read -r -d '' entry; do
      if [[ $entry == "TRAINSUP_GPU_CHECK_RUN=$WORKDIR" ]]; then
        echo "$pid"
        break
      fi
    done 2>/dev/null <"$environ" || true  # a process gone, or not ours to read
  done
}

cleanup() {
  local code=$? pid deadline
  trap - EXIT INT TERM
  set +e  # every step of the cleanup, whatever the one before it did
  # SIGTERM first: the agent forwards it to torchrun and the ranks.
  for pid in "${started_pids[@]}"; do
    alive "$pid" && kill -TERM -- "-$pid" 2>/dev/null
  done
  deadline=$((SECONDS + 15))
  for pid in "${started_pids[@]}"; do
    while alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
  done
  # Then SIGKILL: a group whose leader still runs, and whatever else carries
  # the mark (a pid alone could have been reused by now: the mark cannot).
  for pid in "${started_pids[@]}"; do
    alive "$pid" && kill -KILL -- "-$pid" 2>/dev/null
  done
  if ((${#started_pids[@]} > 0)); then
    for pid in $(marked_pids); do
      kill -KILL "$pid" 2>/dev/null
    done
  fi
  wait 2>/dev/null || true
  echo "logs: $WORKDIR"
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_for SECONDS WATCHED_PID CONDITION...: polls CONDITION until it holds
# (0), WATCHED_PID ends first (2; 0 for none) or SECONDS pass (1).
wait_for() {
  local deadline=$((SECONDS + $1)) watched=$2
  shift 2
  until "$@"; do
    if [[ $watched != 0 ]] && ! alive "$watched"; then
      "$@" && return 0
      return 2
    fi
    ((SECONDS < deadline)) || return 1
    sleep 0.25
  done
}

# -- the python helpers (standard library) --------------------------------

# helper SUBCOMMAND ARGS...: the parsing and judging, in python: nvidia-smi's
# CSV and -q text as the agent reads them (agent/gpu_inventory.cc,
# agent/nvidia_smi_q.cc), the ranks' log, trainsupctl's JSON. Prints a
# message line, then details; exits 0 (ok), 3 (failed) or 4 (could not
# tell).
helper() {
  "$STDLIB_PYTHON" - "$@" <<'PYTHON'
import datetime
import json
import os
import sys

OK, FAILED, UNKNOWN = 0, 3, 4
# The clock event reasons that slow a GPU (docs/gpu.md); idle, the
# applications' clock setting, sync boost and the display do not.
SLOWING = ("SW Power Cap", "HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown",
           "SW Thermal Slowdown")


def pci_address(text):
    """'00000000:3B:00.0', '0000:3b:00' or '3b:00' as the kernel log writes
    it ('0000:3b:00'); None for anything else."""
    text = text.strip()
    if text.startswith("PCI:"):
        text = text[4:]
    parts = text.split(".")[0].split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    try:
        domain, bus, device = (int(p, 16) for p in parts)
    except ValueError:
        return None
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def read_gpus(path):
    """nvidia-smi's --query-gpu CSV, columns found by the header's names; a
    `pci.bus` column alone ("0x3b") is that bus on domain 0, device 0."""
    with open(path) as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    if not lines:
        raise ValueError("nvidia-smi printed nothing")
    header = [c.strip() for c in lines[0].split(",")]
    if "index" not in header:
        raise ValueError(f"nvidia-smi's first line is no header naming index: {lines[0]}")

    def cell(row, name):
        i = header.index(name) if name in header else -1
        return row[i] if 0 <= i < len(row) else ""

    gpus = []
    for line in lines[1:]:
        row = [c.strip() for c in line.split(",")]
        try:
            index = int(cell(row, "index"))
        except ValueError:
            continue
        if "pci.bus_id" in header:
            pci = pci_address(cell(row, "pci.bus_id"))
        else:
            bus = cell(row, "pci.bus")
            pci = pci_address(bus[2:] + ":00") if bus.lower().startswith("0x") else None
        gpus.append({"index": index, "pci": pci, "uuid": cell(row, "uuid"),
                     "serial": cell(row, "serial")})
    return gpus


def visible_entries():
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    # Set but empty: CUDA shows no GPU.
    return None if visible is None else [e.strip() for e in visible.split(",") if e.strip()]


def local_ranks(gpu, nproc):
    """The local ranks that use `gpu`, as the agent maps them: local rank i
    uses the i-th entry of CUDA_VISIBLE_DEVICES (an index, or a UUID or a
    prefix of one) when it is set, else GPU i."""
    entries = visible_entries()
    if entries is None:
        return [gpu["index"]] if gpu["index"] < nproc else []

    def names(entry):
        if entry.isdigit():
            return int(entry) == gpu["index"]
        return len(entry) >= 5 and gpu["uuid"].startswith(entry)

    return [i for i, entry in enumerate(entries[:nproc]) if names(entry)]


def default_nproc(gpus):
    entries = visible_entries()
    return max(1, min(8, len(entries) if entries is not None else len(gpus)))


def gpu_map(csv_path, nproc):
    gpus = read_gpus(csv_path)
    nproc = int(nproc) or default_nproc(gpus)
    entries = visible_entries()
    rule = (f"CUDA_VISIBLE_DEVICES={','.join(entries)}: local rank i uses its i-th entry"
            if entries is not None else "local rank i uses GPU i")
    print(f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} listed; the agent's map for "
          f"torchrun --nproc_per_node={nproc} ({rule})")
    for gpu in gpus:
        ranks = local_ranks(gpu, nproc)
        used = ("local rank " + ", ".join(map(str, ranks))) if ranks else "no local rank"
        print(f"GPU {gpu['index']}  {gpu['pci'] or 'PCI address unknown'}  "
              f"{gpu['uuid'] or 'UUID unknown'}  serial {gpu['serial'] or '-'}  -> {used}")
    return OK if gpus else UNKNOWN


def gpu_health(q_path, csv_path):
    """nvidia-smi -q, read as agent/nvidia_smi_q.cc reads it: a section is
    the last line of indent 4 without a value."""
    try:
        index_of = {g["pci"]: g["index"] for g in read_gpus(csv_path)}
    except (OSError, ValueError):
        index_of = {}
    gpus = []
    section = ""
    with open(q_path, errors="replace") as f:
        for line in f.read().splitlines():
            line = line.rstrip()
            indent = len(line) - len(line.lstrip(" "))
            if line.startswith("GPU ") and indent == 0:
                pci = pci_address(line[4:])
                gpus.append({"name": f"GPU {index_of.get(pci, len(gpus))} ({pci or line[4:]})",
                             "slowed": [], "pending": False, "failure": False, "rows": None})
                section = ""
                continue
            if not gpus or not line:
                continue
            gpu = gpus[-1]
            key, colon, value = line.partition(" : ")
            key, value = key.strip(), value.strip()
            if not colon:
                if indent == 4:
                    section = key
                continue
            if indent == 4:
                section = ""
            elif section in ("Clocks Event Reasons", "Clocks Throttle Reasons"):
                if key in SLOWING and value == "Active":
                    gpu["slowed"].append(key)
            elif section == "Remapped Rows":
                if key == "Pending":
                    gpu["pending"] = value == "Yes"
                elif key == "Remapping Failure Occurred":
                    gpu["failure"] = value == "Yes"
                elif key == "Uncorrectable Error" and value.isdigit():
                    gpu["rows"] = int(value)
    if not gpus:
        print("no GPU block in nvidia-smi -q's output")
        return UNKNOWN
    details = []
    for gpu in gpus:
        if gpu["slowed"]:
            details.append(f"{gpu['name']}: clocks slowed: {', '.join(gpu['slowed'])}")
        if gpu["pending"]:
            rows = f" ({gpu['rows']} uncorrectable remapped rows)" if gpu["rows"] else ""
            details.append(f"{gpu['name']}: a row remap pending{rows}: it takes effect at "
                           "the GPU's next reset")
        if gpu["failure"]:
            details.append(f"{gpu['name']}: a row remapping failed: the GPU needs service")
    slowed = sum(1 for g in gpus if g["slowed"])
    remaps = sum(1 for g in gpus if g["pending"] or g["failure"])
    if not details:
        print(f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} read: none slowed, "
              "no row remap pending")
        return OK
    print(f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} read: {slowed} with slowed clocks, {remaps} with a row remap "
          "pending or failed")
    print("\n".join(details))
    return FAILED


def rank_log(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def count(path, event, generation):
    """How many ranks logged `event` in `generation`."""
    print(len({r["rank"] for r in rank_log(path)
               if r["event"] == event and r["generation"] == int(generation)}))
    return OK


def event_time(event):
    """RFC 3339 from Protobuf's JSON (nanoseconds, 'Z') -> seconds since the epoch."""
    whole, _, fraction = event["time"].rstrip("Z").partition(".")
    seconds = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    return seconds + (float("0." + fraction) if fraction else 0.0)


def job(events_path, jobs_path, log_path, nproc, agent_code):
    """The job's verdict: the stall named the rank that hung, generation 2
    started and trained to the end, the agent exited 0, the job finished."""
    with open(events_path) as f:
        events = json.load(f).get("events", [])
    with open(jobs_path) as f:
        jobs = [j for j in json.load(f).get("jobs", []) if j["job_id"] == "gpu-check"]
    lines = rank_log(log_path)
    nproc, agent_code = int(nproc), int(agent_code)
    hangs = [r for r in lines if r["event"] == "hang" and r["generation"] == 1]
    of_kind = lambda kind: [e for e in events if e["kind"] == kind]  # noqa: E731
    stalls, restarts, recovered = of_kind("stall"), of_kind("restart"), of_kind("recovered")
    ended = {r["rank"] for r in lines if r["event"] == "end" and r["generation"] == 2}
    state = jobs[0]["state"] if jobs else "unknown"
    problems = []
    if not hangs:
        problems.append("no rank hung in generation 1")
    if not stalls:
        problems.append("trainsupd reported no stall")
    elif hangs and stalls[0].get("rank") != hangs[0]["rank"] and not (
            nproc == 1 and "rank" not in stalls[0]):
        # With one rank there is no peer to tell the culprit from: trainsupd
        # reports the job's stall and names no rank.
        problems.append(f"the stall named rank {stalls[0].get('rank', 'none')}, "
                        f"not rank {hangs[0]['rank']}, which hung")
    if not any(int(e["generation"]) == 2 for e in restarts):
        problems.append("no restart to generation 2")
    if len(ended) != nproc:
        problems.append(f"{len(ended)} of {nproc} ranks of generation 2 trained to the end")
    if agent_code != 0:
        problems.append(f"the agent exited {agent_code}")
    if state != "finished":
        problems.append(f"the job is {state}, not finished")
    if problems:
        print("; ".join(problems))
    else:
        named = ("trainsupd named it in a stall event" if "rank" in stalls[0] else
                 "trainsupd reported the stall (one rank: no peer to name a culprit among)")
        print(f"rank {hangs[0]['rank']} hung at step {hangs[0]['step']}; {named}, restarted "
              f"the job, and generation 2 trained its steps on {nproc} "
              f"rank{'s' if nproc != 1 else ''} to the end (exit 0, finished)")
    for e in stalls[:1]:
        print(f"stall: {e['message']}")
    if hangs and stalls:
        threshold = stalls[0].get("figures", {}).get("threshold_seconds")
        print(f"hang -> stall event: {event_time(stalls[0]) - hangs[0]['time']:.1f}s"
              + (f" (threshold {threshold:.1f}s)" if threshold is not None else ""))
    firsts = [r["time"] for r in lines if r["event"] == "first_step" and r["generation"] == 2]
    if hangs and firsts:
        figures = recovered[0].get("figures", {}) if recovered else {}
        parts = [f"{name} {figures[name + '_seconds']:.1f}s"
                 for name in ("detect", "stop", "backoff", "relaunch", "first_step")
                 if name + "_seconds" in figures]
        print(f"hang -> generation 2's first step: {min(firsts) - hangs[0]['time']:.1f}s"
              + (f" (trainsupd: {' + '.join(parts)})" if parts else ""))
    return FAILED if problems else OK


def binding(csv_path, log_path, nproc):
    """Each local rank's GPU as CUDA bound it against the agent's map."""
    gpus = read_gpus(csv_path)
    nproc = int(nproc)
    bound = {}
    for r in rank_log(log_path):
        if r["event"] == "start" and r.get("gpu_pci"):
            bound[r["local_rank"]] = r["gpu_pci"]
    if not bound:
        print("this torch does not say which PCI address a device is at "
              "(torch.cuda.get_device_properties has no pci_bus_id)")
        return UNKNOWN
    wrong = []
    for local_rank in range(nproc):
        mapped = [g for g in gpus if local_rank in local_ranks(g, nproc)]
        actual = bound.get(local_rank)
        if actual is None:
            continue
        if len(mapped) != 1 or mapped[0]["pci"] != actual:
            where = (f"GPU {mapped[0]['index']} at {mapped[0]['pci']}" if len(mapped) == 1
                     else "no single GPU")
            wrong.append(f"local rank {local_rank} runs on {actual}; the agent maps it to "
                         f"{where}")
    if wrong:
        print("; ".join(wrong) + ": an Xid would name the wrong ranks (CUDA's order is not "
              "nvidia-smi's: set CUDA_DEVICE_ORDER=PCI_BUS_ID for the job)")
        return FAILED
    print(f"{len(bound)} local rank{'s' if len(bound) != 1 else ''} on the GPU the agent "
          "maps each to: " + ", ".join(f"{k} -> {v}" for k, v in sorted(bound.items())))
    return OK


COMMANDS = {"gpu-map": gpu_map, "gpu-health": gpu_health, "count": count, "job": job,
            "binding": binding}
try:
    sys.exit(COMMANDS[sys.argv[1]](*sys.argv[2:]))
except (OSError, ValueError, KeyError) as error:
    print(f"{type(error).__name__}: {error}")
    sys.exit(UNKNOWN)
PYTHON
}

# run_helper VAR SUBCOMMAND ARGS...: the helper's output in VAR, its exit code
# in helper_code.
run_helper() {
  local -n output=$1
  shift
  helper_code=0
  output=$(helper "$@") || helper_code=$?
}

# report CHECK OUTPUT CODE: the verdict of a helper's answer (the first line
# the message, the rest details).
report() {
  local check=$1 output=$2 code=$3 first rest=""
  first=${output%%$'\n'*}
  [[ $output == *$'\n'* ]] && rest=${output#*$'\n'}
  case "$code" in
    0) verdict "$check" ok "$first" ;;
    3) verdict "$check" fail "$first" ;;
    *) verdict "$check" skip "$first" ;;
  esac
  [[ -z $rest ]] || indent <<<"$rest"
}

# -- python ---------------------------------------------------------------

# The checks parse with any python 3; the job runs with one that has torch.
STDLIB_PYTHON=$(command -v python3 || command -v "${PYTHON:-python3}" || true)
if [[ -z $STDLIB_PYTHON ]]; then
  echo "error: no python3 on PATH: the checks read what they ask in python" >&2
  exit 1
fi

# The python whose torch the job runs with: $PYTHON, else the first of
# python3 on PATH (a virtualenv's, with a CUDA build of torch) and
# /usr/bin/python3 (Debian's python3-torch) that imports torch.
torch_python() {
  local candidate
  if [[ -n ${PYTHON:-} ]]; then
    echo "$PYTHON"
    return
  fi
  for candidate in python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import torch' 2>/dev/null; then
      command -v "$candidate"
      return
    fi
  done
}

# -- a. nvidia-smi ------------------------------------------------------------

echo "=== a. nvidia-smi: the GPUs the agent maps, their health"
gpus_listed=0
no_gpu_reason=""
smi=$(command -v nvidia-smi || true)
if [[ -z $smi ]]; then
  no_gpu_reason="no nvidia-smi on PATH"
  verdict nvidia-smi skip "no nvidia-smi on PATH (the agent's --nvidia-smi default): no GPU to map"
  verdict "GPU health" skip "no nvidia-smi on PATH"
else
  # As the agent asks it: 10 s at most.
  smi_code=0
  timeout 10 "$smi" --query-gpu=index,pci.bus_id,uuid,serial --format=csv \
    >"$SMI_CSV" 2>"$WORKDIR/nvidia-smi-query-gpu.err" || smi_code=$?
  if [[ $smi_code != 0 ]]; then
    why=$(cat "$WORKDIR/nvidia-smi-query-gpu.err" "$SMI_CSV" | grep -m 1 . || true)
    if [[ $smi_code == 6 ]]; then  # nvidia-smi's "No devices were found"
      no_gpu_reason="nvidia-smi lists no GPU"
      verdict nvidia-smi skip "$smi lists no GPU: ${why:-exit 6}"
    else
      no_gpu_reason="nvidia-smi does not answer"
      verdict nvidia-smi fail "$smi --query-gpu exited $smi_code: ${why:-no message}"
    fi
    verdict "GPU health" skip "nvidia-smi does not list the GPUs"
  else
    smi_map=""
    run_helper smi_map gpu-map "$SMI_CSV" 0
    gpus_listed=$(($(grep -c . "$SMI_CSV" || true) - 1))
    if [[ $helper_code != 0 || $gpus_listed -lt 1 ]]; then
      gpus_listed=0
      no_gpu_reason="nvidia-smi lists no GPU"
      verdict nvidia-smi skip "$smi lists no GPU the agent can read: ${smi_map%%$'\n'*}"
    else
      verdict nvidia-smi ok "$smi: ${smi_map%%$'\n'*}"
      indent <<<"${smi_map#*$'\n'}"
    fi
    q_code=0
    timeout 10 "$smi" -q -d PERFORMANCE,ROW_REMAPPER >"$WORKDIR/nvidia-smi-q.txt" \
      2>"$WORKDIR/nvidia-smi-q.err" || q_code=$?
    if [[ $q_code != 0 ]]; then
      verdict "GPU health" skip "nvidia-smi -q -d PERFORMANCE,ROW_REMAPPER exited $q_code: $(
        cat "$WORKDIR/nvidia-smi-q.err" "$WORKDIR/nvidia-smi-q.txt" | grep -m 1 . || true)"
    else
      health=""
      run_helper health gpu-health "$WORKDIR/nvidia-smi-q.txt" "$SMI_CSV"
      report "GPU health" "$health" "$helper_code"
    fi
  fi
fi

# -- b. the kernel log ------------------------------------------------------------

echo "=== b. the kernel log: where the driver's Xid lines arrive"
user=$(id -un 2>/dev/null || id -u)
if [[ ! -e /dev/kmsg ]]; then
  verdict "kernel log" skip "no /dev/kmsg here (a container?): the agent hears no Xid unless \
--kernel-log names a syslog file the driver's lines reach"
# Opening it is the test: the kernel checks the syslog permission at open
# (kernel.dmesg_restrict, CAP_SYSLOG), which the file's mode does not show.
elif (exec 3</dev/kmsg) 2>/dev/null; then
  verdict "kernel log" ok "/dev/kmsg is readable by $user: an agent run as $user hears the \
driver's Xid lines (its default --kernel-log)"
else
  verdict "kernel log" skip "/dev/kmsg is not readable by $user (kernel.dmesg_restrict=$(
    cat /proc/sys/kernel/dmesg_restrict 2>/dev/null || echo '?')): an agent run as $user \
hears no Xid; run it as root or with CAP_SYSLOG, or give --kernel-log a syslog file"
fi
dmesg_code=0
dmesg >"$WORKDIR/dmesg.txt" 2>"$WORKDIR/dmesg.err" || dmesg_code=$?
if [[ $dmesg_code != 0 ]]; then
  verdict "Xid history" skip "dmesg exited $dmesg_code: $(grep -m 1 . "$WORKDIR/dmesg.err" || true)"
else
  grep 'NVRM: Xid' "$WORKDIR/dmesg.txt" >"$WORKDIR/xid-history.txt" || true
  xids=$(grep -c . "$WORKDIR/xid-history.txt" || true)
  if [[ $xids == 0 ]]; then
    verdict "Xid history" ok "no Xid line in dmesg since boot"
  else
    verdict "Xid history" ok "$xids Xid line(s) in dmesg since boot (history, not a \
failure; the agent acts only on those written after it starts); the last:"
    tail -n 5 "$WORKDIR/xid-history.txt" | indent
  fi
fi

# -- c. torch and CUDA ----------------------------------------------------------------

echo "=== c. torch, CUDA and NCCL"
cuda_gpus=0
TORCH_PYTHON=$(torch_python || true)
if [[ -z $TORCH_PYTHON ]]; then
  verdict torch skip "no python here imports torch (python3 on PATH, /usr/bin/python3; \
set PYTHON to the one your jobs use)"
  verdict NCCL skip "no torch"
  no_gpu_reason=${no_gpu_reason:-"no torch"}
else
  torch_code=0
  torch_facts=$(timeout 120 "$TORCH_PYTHON" -c '
import torch, torch.distributed as dist
print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count(),
      dist.is_available() and dist.is_nccl_available())
' 2>"$WORKDIR/torch.err") || torch_code=$?
  if [[ $torch_code != 0 ]]; then
    verdict torch fail "$TORCH_PYTHON: torch's check exited $torch_code: $(
      tail -n 1 "$WORKDIR/torch.err")"
    verdict NCCL skip "torch's check failed"
    no_gpu_reason=${no_gpu_reason:-"torch's check failed"}
  else
    read -r torch_version torch_cuda cuda_available cuda_count nccl_available <<<"$torch_facts"
    built="CUDA $torch_cuda"
    [[ $torch_cuda != None ]] || built="built without CUDA"
    if [[ $cuda_available == True && $cuda_count -ge 1 ]]; then
      cuda_gpus=$cuda_count
      verdict torch ok "$TORCH_PYTHON: torch $torch_version ($built): \
torch.cuda.is_available() True, device_count() $cuda_count"
      if [[ $nccl_available == True ]]; then
        if ((cuda_count >= 2)); then
          verdict NCCL ok "available: the job all-reduces with NCCL"
        else
          verdict NCCL ok "available (one GPU: the job all-reduces with gloo on CUDA tensors)"
        fi
      elif ((cuda_count >= 2)); then
        verdict NCCL fail "torch.distributed.is_nccl_available() is False with $cuda_count GPUs"
      else
        verdict NCCL skip "not available (one GPU: the job uses gloo)"
      fi
    else
      message="$TORCH_PYTHON: torch $torch_version ($built) sees no GPU: \
torch.cuda.is_available() $cuda_available, device_count() $cuda_count"
      if ((gpus_listed > 0)); then
        verdict torch fail "$message, where nvidia-smi lists $gpus_listed"
        no_gpu_reason="nvidia-smi lists $gpus_listed GPU(s), torch sees none"
      else
        verdict torch skip "$message"
        no_gpu_reason=${no_gpu_reason:-"torch.cuda is not available"}
      fi
      verdict NCCL skip "no CUDA"
    fi
  fi
fi
((cuda_gpus > 0)) || no_gpu_reason=${no_gpu_reason:-"torch.cuda is not available"}

# -- d. a short job under trainsup ----------------------------------------------

# The binaries, built as scripts/demo.sh builds them when they are missing.
binaries_ready() {
  TRAINSUPD=${TRAINSUPD:-$REPO/build/daemon/trainsupd}
  TRAINSUP_AGENT=${TRAINSUP_AGENT:-$REPO/build/agent/trainsup-agent}
  TRAINSUPCTL=${TRAINSUPCTL:-$REPO/build/cli/trainsupctl}
  local binary missing=()
  for binary in "$TRAINSUPD" "$TRAINSUP_AGENT" "$TRAINSUPCTL"; do
    [[ -x $binary ]] || missing+=("$binary")
  done
  ((${#missing[@]} == 0)) && return 0
  echo "    building trainsupd, trainsup-agent and trainsupctl (missing: ${missing[*]}); \
output in $WORKDIR/build.log"
  if ! { bash scripts/install-deps.sh --demo &&
    bash scripts/build.sh trainsupd trainsup-agent trainsupctl; } >"$WORKDIR/build.log" 2>&1; then
    tail -n 5 "$WORKDIR/build.log" | indent
    return 1
  fi
  for binary in "$TRAINSUPD" "$TRAINSUP_AGENT" "$TRAINSUPCTL"; do
    [[ -x $binary ]] || return 1
  done
}

ctl() {
  timeout 30 "$TRAINSUPCTL" --supervisor "$grpc_address" "$@"
}

# Whether the job has an event of kind $1.
has_event() {
  local events
  events=$(ctl -o json events "$JOB" --kind "$1" 2>/dev/null) || return 1
  [[ $events == *'"kind"'* ]]
}

# Whether $2 ranks logged event $1 in generation $3.
ranks_logged() {
  local n
  n=$(helper count "$RANK_LOG" "$1" "$3") || return 1
  ((n >= $2))
}

job_finished() {
  [[ $(ctl -o json jobs 2>/dev/null) == *'"state": "finished"'* ]]
}

supervisor_listening() {
  grep -q 'listening grpc=' "$WORKDIR/trainsupd.log"
}

# job_failed WHY: the job's verdict when it could not go on, with the end of
# the logs that say why.
job_failed() {
  verdict job fail "$1"
  echo "    the agent's log (torchrun and the ranks' output), last lines:"
  tail -n 15 "$WORKDIR/agent.log" | indent
}

run_job() {
  local nproc=$1 device=$2 code
  if ! binaries_ready; then
    verdict job fail "the binaries are not built and building them failed (see build.log)"
    return
  fi
  start "$WORKDIR/trainsupd.log" "$TRAINSUPD" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    --state "$WORKDIR/state.db" "${SUPERVISOR_ARGS[@]}"
  local supervisor_pid=$!
  code=0
  wait_for 20 "$supervisor_pid" supervisor_listening || code=$?
  if [[ $code != 0 ]]; then
    verdict job fail "trainsupd did not start listening: $(tail -n 1 "$WORKDIR/trainsupd.log")"
    return
  fi
  grpc_address=$(sed -n 's/.*listening grpc=\([^ ]*\) .*/\1/p' "$WORKDIR/trainsupd.log" | head -n 1)
  echo "    trainsupd on $grpc_address (${SUPERVISOR_ARGS[*]})"

  local agent_args=(run --supervisor "$grpc_address" --job "$JOB")
  # The real nvidia-smi (none where there is none); the kernel log the default.
  agent_args+=(--nvidia-smi "${smi:-none}")
  local train_args=(--steps "$STEPS" --hang-step "$HANG_STEP" --log "$RANK_LOG")
  [[ $device == cpu ]] && train_args+=(--device cpu)
  echo "    trainsup-agent ${agent_args[*]} -- torchrun --standalone --nproc_per_node=$nproc \
scripts/gpu_check_train.py ${train_args[*]}"
  PYTHONPATH="$REPO/agent/python${PYTHONPATH:+:$PYTHONPATH}" \
    start "$WORKDIR/agent.log" "$TRAINSUP_AGENT" "${agent_args[@]}" -- \
    "$TORCH_PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$nproc" \
    --monitor_interval=1 --log_dir="$WORKDIR/torchrun" \
    --redirects=2 --tee=2 \
    "$REPO/scripts/gpu_check_train.py" "${train_args[@]}"
  local agent_pid=$!

  code=0
  wait_for "$START_DEADLINE" "$agent_pid" ranks_logged start "$nproc" 1 || code=$?
  if [[ $code != 0 ]]; then
    job_failed "the $nproc ranks did not start within ${START_DEADLINE}s"
    return
  fi
  # What the agent made of the kernel log and nvidia-smi, in its own words.
  grep 'following .* for GPU errors\|GPU errors are not heard' "$WORKDIR/agent.log" \
    | sed 's/^.*trainsup-agent: /the agent: /' | indent || true
  echo "    $nproc rank(s) training; in generation 1 the last one hangs at step $HANG_STEP"
  code=0
  wait_for "$HANG_DEADLINE" "$agent_pid" ranks_logged hang 1 1 || code=$?
  if [[ $code != 0 ]]; then
    job_failed "no rank reached step $HANG_STEP within ${HANG_DEADLINE}s"
    return
  fi
  echo "    a rank hangs; waiting for trainsupd to see it"
  code=0
  wait_for "$STALL_DEADLINE" "$agent_pid" has_event stall || code=$?
  if [[ $code != 0 ]]; then
    job_failed "no stall event within ${STALL_DEADLINE}s of the hang"
    return
  fi
  echo "    stall reported; waiting for generation 2"
  code=0
  wait_for "$RECOVERY_DEADLINE" "$agent_pid" ranks_logged first_step "$nproc" 2 || code=$?
  if [[ $code != 0 ]]; then
    job_failed "generation 2 did not start training within ${RECOVERY_DEADLINE}s"
    return
  fi
  echo "    generation 2 trains; waiting for its end"
  code=0
  wait_for "$END_DEADLINE" 0 eval '! alive '"$agent_pid" || code=$?
  if [[ $code != 0 ]]; then
    job_failed "the agent did not exit within ${END_DEADLINE}s of generation 2's start"
    return
  fi
  local agent_code=0
  wait "$agent_pid" || agent_code=$?
  # The job is finished once trainsupd has the agent's last report.
  wait_for 10 0 job_finished || true
  ctl -o json events "$JOB" >"$WORKDIR/events.json" 2>&1 || true
  ctl -o json jobs >"$WORKDIR/jobs.json" 2>&1 || true
  ctl events "$JOB" >"$WORKDIR/events.txt" 2>&1 || true
  ctl stacks "$JOB" >"$WORKDIR/stacks.txt" 2>&1 || true
  local outcome
  run_helper outcome job "$WORKDIR/events.json" "$WORKDIR/jobs.json" "$RANK_LOG" "$nproc" \
    "$agent_code"
  if [[ $device == cpu ]]; then
    outcome="on CPU (TRAINSUP_GPU_CHECK_CPU_RANKS: no GPU checked): $outcome"
  fi
  report job "$outcome" "$helper_code"
  if [[ $helper_code == 3 ]]; then
    tail -n 15 "$WORKDIR/agent.log" | indent
  fi
  if [[ $device == cuda ]]; then
    local bound
    run_helper bound binding "$SMI_CSV" "$RANK_LOG" "$nproc"
    report "GPU binding" "$bound" "$helper_code"
  fi
}

echo "=== d. a short job under trainsup: a hang, a restart"
if [[ -z $no_gpu_reason ]]; then
  nproc=$((cuda_gpus > 8 ? 8 : cuda_gpus))
  run_job "$nproc" cuda
elif [[ -n ${TRAINSUP_GPU_CHECK_CPU_RANKS:-} && -n $TORCH_PYTHON ]]; then
  echo "    no GPU ($no_gpu_reason): on CPU, as TRAINSUP_GPU_CHECK_CPU_RANKS asks"
  run_job "$TRAINSUP_GPU_CHECK_CPU_RANKS" cpu
else
  verdict job skip "no NVIDIA GPU usable ($no_gpu_reason): the CUDA job did not run"
fi

# -- e. the summary ----------------------------------------------------------

echo "=== summary"
join() {
  local IFS=, items
  items="$*"
  echo "${items//,/, }"
}
echo "checked: $(join "${checks_ok[@]}" "${checks_failed[@]%% (*}")"
for item in "${checks_skipped[@]}"; do echo "could not check: $item"; done
for item in "${checks_failed[@]}"; do echo "FAILED: $item"; done
if [[ -n $no_gpu_reason ]]; then
  ran=$(join "${checks_ok[@]}" "${checks_failed[@]%% (*}")
  not_run="the CUDA job did not run"
  [[ -z ${TRAINSUP_GPU_CHECK_CPU_RANKS:-} ]] || not_run="the job ran on CPU, on no GPU"
  if ((gpus_listed > 0)); then
    echo "no NVIDIA GPU usable here ($no_gpu_reason): checked only ${ran:-nothing}; $not_run"
  else
    echo "no NVIDIA GPU here ($no_gpu_reason): checked only ${ran:-nothing}; $not_run"
  fi
  exit 2
fi
if ((${#checks_failed[@]} > 0)); then
  echo "FAILED: ${#checks_failed[@]} check(s)"
  exit 1
fi
echo "OK: every check that could run passed"
exit 0
