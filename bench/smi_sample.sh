#!/usr/bin/env bash
# Samples the cards until killed (for bench/audit_check.py):
#   bench/smi_sample.sh OUT_FILE [INTERVAL_S=0.2]
# OUT_FILE: "T <unix time>" then one line "<pid>, <gpu uuid>, <used MiB>" per process on
# a card; OUT_FILE.util: "<unix time>, <index>, <uuid>, <utilisation %>, <memory used MiB>"
# per card.
set -u
out=${1:?usage: smi_sample.sh OUT_FILE [INTERVAL_S]}; every=${2:-0.2}
: > "$out"; : > "$out.util"
while :; do
  now=$(date +%s.%N)
  apps=$(nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits 2>/dev/null)
  cards=$(nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used --format=csv,noheader,nounits 2>/dev/null)
  { echo "T $now"; [ -n "$apps" ] && echo "$apps"; } >> "$out"
  [ -n "$cards" ] && echo "$cards" | sed "s/^/$now, /" >> "$out.util"
  sleep "$every"
done
