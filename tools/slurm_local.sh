#!/usr/bin/env bash
# A throwaway one-node Slurm cluster on the local host (real slurmctld + slurmd, Debian 12's
# slurm-wlm 22.05), for the launcher tests (tests/launchers/launchers_test.cc) and for trying gyre
# under srun by hand. Root only; no systemd, nothing outside DIR.
#
#   tools/slurm_local.sh start DIR   # starts the daemons, prints 'export SLURM_CONF=DIR/slurm.conf'
#   SLURM_CONF=DIR/slurm.conf srun -n 4 build/bin/gyre-bench
#   tools/slurm_local.sh stop DIR    # stops them (by pid file) and removes DIR
#
# Knobs: SLURM_LOCAL_CTLD_PORT / SLURM_LOCAL_SLURMD_PORT (6817 / 6818; the test picks free
# ones), SLURM_LOCAL_CPUS (advertised CPUs, default max(nproc, 8): with
# SlurmdParameters=config_overrides srun -n 4 runs on a 2-CPU host instead of queueing
# forever). Authentication is auth/none (still in 22.05), so no munge key is needed.
# The node is named after this host (`hostname -s`), which must resolve: SLURM_*NODELIST
# then names a host that gyre can reach rank 0 at.
set -euo pipefail

cmd=${1:-}
D=${2:-}
[[ -n "$cmd" && -n "$D" ]] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
CPORT=${SLURM_LOCAL_CTLD_PORT:-6817}
DPORT=${SLURM_LOCAL_SLURMD_PORT:-6818}
NPROC=$(nproc)
CPUS=${SLURM_LOCAL_CPUS:-$(( NPROC > 8 ? NPROC : 8 ))}
NODE=$(hostname -s)
CONF=$D/slurm.conf

log() { echo "slurm_local: $*" >&2; }

# Alive and not a zombie: PID 1 on some machines does not reap the daemons' zombies.
alive() { [ -r "/proc/$1/stat" ] && ! awk '{exit ($3=="Z")?0:1}' "/proc/$1/stat" 2>/dev/null; }

stop_pidfile() {
  local f=$1 p i
  [ -f "$f" ] || return 0
  p=$(cat "$f" 2>/dev/null || true)
  if [ -n "$p" ]; then
    kill "$p" 2>/dev/null || true
    for i in $(seq 1 50); do alive "$p" || break; sleep 0.1; done
    alive "$p" && kill -9 "$p" 2>/dev/null || true
  fi
  rm -f "$f"
}

do_stop() {
  [ -d "$D" ] || return 0
  stop_pidfile "$D/slurmd.pid"
  stop_pidfile "$D/slurmctld.pid"
  rm -rf "$D"
}

write_conf() {
  mkdir -p "$D"/{state,spool,log}
  cat > "$CONF" <<CONF
ClusterName=gyrelocal
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CPORT
SlurmdPort=$DPORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SchedulerType=sched/builtin
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=2
KillWait=2
Waittime=0
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$CPUS State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
}

do_start() {
  [ "$(id -u)" -eq 0 ] || { log "needs root (the daemons run as root here)"; exit 1; }
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null ||
    { log "slurmctld/slurmd missing: apt-get install slurm-wlm (tools/setup.sh)"; exit 1; }
  do_stop
  write_conf
  export SLURM_CONF=$CONF
  # Each daemonizes (pid in $D/<daemon>.pid) and writes why it failed to its log only.
  slurmctld -f "$CONF" || { log "slurmctld failed to start:"; tail -20 "$D/log/slurmctld.log" >&2 || true; exit 1; }
  local i up=0
  for i in $(seq 1 100); do
    if scontrol ping 2>/dev/null | grep -q UP; then up=1; break; fi
    sleep 0.1
  done
  if [ "$up" != 1 ]; then log "slurmctld did not come up:"; tail -20 "$D/log/slurmctld.log" >&2 || true; exit 1; fi
  if ! slurmd -f "$CONF" -N "$NODE"; then
    log "slurmd failed to start:"; tail -20 "$D/log/slurmd.log" >&2 || true
    grep -q "No filesystem mounted on /sys/fs/cgroup" "$D/log/slurmd.log" 2>/dev/null &&
      log "slurmd needs the cgroup file system at /sys/fs/cgroup (a container or chroot without it: mount it there)"
    exit 1
  fi
  for i in $(seq 1 200); do
    if [ -n "$(sinfo -h -N -t idle -o %N 2>/dev/null)" ]; then
      echo "export SLURM_CONF=$CONF"
      return 0
    fi
    sleep 0.1
  done
  log "the node did not become idle:"; sinfo -N -l >&2 || true
  tail -20 "$D"/log/*.log >&2 || true
  exit 1
}

case "$cmd" in
  start) do_start ;;
  stop) do_stop ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
