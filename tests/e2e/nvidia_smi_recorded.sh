#!/bin/sh
# A stand-in for nvidia-smi on a machine without GPUs (tests/testdata/gpu
# README.md and throttling/SOURCES.md say where each recording came from):
# - the agent's --query-gpu call: a real recorded listing;
# - `-q` (the agent's GPU health read): the recorded `nvidia-smi -q` that
#   $TRAINSUP_TEST_NVIDIA_SMI_Q names, relative to tests/testdata/gpu (unset:
#   refused, as on a machine whose driver does not answer);
# anything else is refused as nvidia-smi would.
data="$(dirname "$0")/../testdata/gpu"
case " $* " in
  *" --query-gpu="*) exec cat "$data/nvidia_smi_5gpu.csv" ;;
  *" -q "*)
    if [ -n "${TRAINSUP_TEST_NVIDIA_SMI_Q:-}" ]; then
      exec cat "$data/$TRAINSUP_TEST_NVIDIA_SMI_Q"
    fi ;;
esac
echo "nvidia-smi stand-in: not recorded: $*" >&2
exit 2
