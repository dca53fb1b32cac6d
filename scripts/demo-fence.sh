#!/bin/sh
# The demo's --fence-command: prints what a cluster scheduler would be told.
# In production this would be e.g.
#   scontrol update NodeName="$1" State=DRAIN Reason="trainsup: $2"
echo "would drain $1 in the scheduler (reason: $2)"
