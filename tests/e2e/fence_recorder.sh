#!/bin/sh
# A stand-in for a cluster scheduler's drain command (scontrol / kubectl):
# records its arguments, one call per line, in $FENCE_LOG.
printf '%s\t%s\n' "$1" "$2" >> "${FENCE_LOG:?FENCE_LOG is not set}"
echo "drained $1"
