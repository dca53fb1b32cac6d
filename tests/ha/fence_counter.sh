#!/bin/sh
# A fence command that counts its runs: appends "start NODE" to $FENCE_LOG,
# sleeps $FENCE_SLOW_SECONDS when NODE is $FENCE_SLOW_NODE (a scheduler that
# is slow to drain it), then appends "done NODE".
printf 'start %s\n' "$1" >> "${FENCE_LOG:?FENCE_LOG is not set}"
if [ "$1" = "${FENCE_SLOW_NODE:-}" ]; then sleep "${FENCE_SLOW_SECONDS:-5}"; fi
printf 'done %s\n' "$1" >> "$FENCE_LOG"
echo "drained $1"
