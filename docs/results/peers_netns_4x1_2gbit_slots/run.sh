#!/bin/bash
# A/B under two nice-19 busy loops: gyre default slots vs GYRE_SLOT_BYTES=$ALT, gloo beside.
cd /work/main
export GYRE_BIN=$PWD/build/bin BUILD=/tmp/gyre-peers/build MINB=4M MAXB=64M
out=/tmp/s14/hogs
hogs() { for i in 1 2; do nice -n 19 sh -c 'while :; do :; done' & done; }
for r in ${ROUNDS:-1 2}; do
  for load in quiet hogs; do
    [ $load = hogs ] && hogs
    echo "== $load $r $(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"
    GYRE_PEERS_OUT=$out/$load$r-def PEERS="gyre gloo" GLOO_ALGOS="allreduce_ring ring_chunked" ../shared/peers/run_netns.sh 4 2gbit >$out/$load$r-def.log 2>&1
    GYRE_SLOT_BYTES=$ALT GYRE_PEERS_OUT=$out/$load$r-alt PEERS="gyre" ../shared/peers/run_netns.sh 4 2gbit >$out/$load$r-alt.log 2>&1
    [ $load = hogs ] && { pkill -f 'while :; do :; done'; sleep 1; }
    for d in $out/$load$r-def $out/$load$r-alt; do
      for f in $d/results/netns_*.txt; do
        printf '%-40s' "$(basename $d)/$(basename $f .txt | sed 's/netns_//;s/_n4_2gbit//')"
        awk '!/^#/ && NF>=13 {printf " %5.1f%%", $12/0.25*100} !/^#/ && NF==11 {printf " %5.1f%%", $7/0.25*100}' $f; echo
      done
    done
  done
done
echo "== done $(date +%T)"
