#!/usr/bin/env bash
# A/B quiet and under two nice-19 busy loops: gyre's slots then (128 KiB) against
# GYRE_SLOT_BYTES=$ALT (512K here), Gloo beside; 4 hosts x 1 rank, 2 Gbit/s, 4-64 MiB.
# Prints each table's busbw as % of the link. Writes bench/results/peers_netns_4x1_2gbit_slots/
# (SLOTS_OUT).
# Run before the default became 512 KiB on all-tcp pipes: to repeat it now, the first
# run needs GYRE_SLOT_BYTES=128K. Needs the peers' harness (tools/peers_harness.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.." || exit 2  # the repository root
source tools/peers_harness.sh
peers_harness_find || exit 2
: "${ALT:?the other slot size, e.g. ALT=512K}"
export MINB=4M MAXB=64M
out=${SLOTS_OUT:-bench/results/peers_netns_4x1_2gbit_slots}
trap busy_loops_stop EXIT
for r in ${ROUNDS:-1 2}; do
  for load in quiet hogs; do
    [ $load = hogs ] && busy_loops_start 2
    echo "== $load $r $(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"
    GYRE_PEERS_OUT=$out/$load$r-def PEERS="gyre gloo" GLOO_ALGOS="allreduce_ring ring_chunked" \
      "$PEERS_RUN_NETNS" 4 2gbit >$out/$load$r-def.log 2>&1
    GYRE_SLOT_BYTES=$ALT GYRE_PEERS_OUT=$out/$load$r-alt PEERS="gyre" \
      "$PEERS_RUN_NETNS" 4 2gbit >$out/$load$r-alt.log 2>&1
    busy_loops_stop
    for d in $out/$load$r-def $out/$load$r-alt; do
      for f in "$d"/results/netns_*.txt; do
        printf '%-40s' "$(basename "$d")/$(basename "$f" .txt | sed 's/netns_//;s/_n4_2gbit//')"
        awk '!/^#/ && NF>=13 {printf " %5.1f%%", $12/0.25*100} !/^#/ && NF==11 {printf " %5.1f%%", $7/0.25*100}' "$f"; echo
      done
    done
  done
done
echo "== done $(date +%T)"
