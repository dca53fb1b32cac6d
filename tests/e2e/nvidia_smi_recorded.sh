#!/bin/sh
# A stand-in for nvidia-smi on a machine without GPUs: answers the agent's
# --query-gpu call with a real recorded listing (tests/testdata/gpu/README.md
# says where it came from), and refuses anything else as nvidia-smi would.
case " $* " in
  *" --query-gpu="*) exec cat "$(dirname "$0")/../testdata/gpu/nvidia_smi_5gpu.csv" ;;
esac
echo "nvidia-smi stand-in: only --query-gpu is recorded" >&2
exit 2
