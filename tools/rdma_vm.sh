#!/bin/bash
# tools/rdma_vm.sh - run a command inside a throw-away QEMU VM that has a real (soft-RoCE, rdma_rxe)
# RDMA verbs stack, with a host folder shared read-write at the same absolute path.
#
#   usage: rdma_vm.sh <host-dir-to-share> <command...>
#     one argument after the dir  -> a shell command line (pipes, &&, ... allowed)
#     several arguments           -> an argv, run as is
#   The command runs as root in <host-dir> (cwd) inside the VM; its stdout+stderr stream to
#   this script's stdout; the script exits with the command's exit status
#   (125 = the VM or the RDMA setup failed, 124 = timeout).
#
# What the VM is: Debian 12's stock kernel (linux-image-amd64 -> linux-image-6.1.0-NN-amd64,
# unpacked, never installed on the host) + a busybox initramfs that loads virtio/9p/overlay/
# rdma_rxe modules, mounts the HOST's / read-only over 9p (so the guest userland, libibverbs,
# the rxe provider and compilers are exactly the host's), puts a tmpfs overlay on top, mounts
# <host-dir> read-write over 9p at its own path, creates the rxe device(s) and runs the command.
# The VM has no network backend at all: RoCE traffic stays inside the guest kernel.
#
# Environment knobs:
#   RDMA_VM_CACHE   image cache dir               (default /var/tmp/gyre-rdma-vm)
#   RDMA_VM_MEM     guest memory in MiB           (default 2048)
#   RDMA_VM_SMP     guest vCPUs                   (default 2)
#   RDMA_VM_ACCEL   tcg | kvm                     (default tcg; kvm where KVM boots a stock kernel: not PVM)
#   RDMA_VM_TIMEOUT seconds for the whole VM run  (default 1800)
#   RDMA_VM_TOPO    single | pair | none          (default pair)
#       single: rxe0 on a dummy netdev 'rdma0' (192.168.77.1); QPs loop back inside rxe0
#       pair:   as single, plus veth pair va/vb (192.168.78.1/.2) with rxe_a / rxe_b on them and
#               policy routing so packets really cross the veth ("two hosts" in one kernel)
#       none:   modules loaded, no rxe device created (do it yourself with `rdma link add`)
#   RDMA_VM_KEEP=1  keep the per-run folder (console.log, rc) under /tmp
#   RDMA_VM_QUIET=1 no progress lines on stderr
#   RDMA_VM_SHOW_CONSOLE=1 print the guest kernel console log (stderr) after the run
# Inside the guest the command sees: RDMA_VM=1, RDMA_DEV, RDMA_GID_INDEX (and for 'pair'
# RDMA_DEV_A/RDMA_DEV_B, RDMA_GID_INDEX_A/B, RDMA_IP_A/B, RDMA_NETDEV_A/B, and RDMA_VM_RELINK:
# a script that brings the veth pair back up, with its routes, after a test took it down).
set -euo pipefail

CACHE=${RDMA_VM_CACHE:-/var/tmp/gyre-rdma-vm}
MEM=${RDMA_VM_MEM:-2048}
SMP=${RDMA_VM_SMP:-2}
ACCEL=${RDMA_VM_ACCEL:-tcg}
TIMEOUT=${RDMA_VM_TIMEOUT:-1800}
TOPO=${RDMA_VM_TOPO:-pair}
PKGS="qemu-system-x86 busybox-static kmod cpio gzip ibverbs-utils ibverbs-providers libibverbs-dev iproute2"

say() { [ -n "${RDMA_VM_QUIET:-}" ] || echo "[rdma_vm $(date +%T)] $*" >&2; }
die() { echo "[rdma_vm] ERROR: $*" >&2; exit 125; }

[ $# -ge 2 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
SHARE=$(cd "$1" && pwd -P) || die "no such dir: $1"
shift
[ "$(id -u)" = 0 ] || die "must run as root (9p passthrough of /, apt-get)"

# ---------------------------------------------------------------- packages (host == guest userland)
apt_updated=
apt_update_once() {
  [ -z "$apt_updated" ] || return 0
  local tries=0
  until apt-get -o DPkg::Lock::Timeout=600 update -q >&2; do   # lists lock: retry, never kill the holder
    tries=$((tries + 1)); [ $tries -lt 10 ] || die "apt-get update failed"
    say "apt-get update failed (lock held by another apt?), retrying in 30 s"; sleep 30
  done
  apt_updated=1
}
apt_install() {
  local tries=0
  apt_update_once
  until DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >&2; do
    tries=$((tries + 1)); [ $tries -lt 5 ] || die "apt-get install $* failed"
    say "apt-get install failed (dpkg lock held by another process?), retrying in 30 s"; sleep 30
  done
}
missing=
for p in $PKGS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"; done
if [ -n "$missing" ]; then say "installing:$missing"; apt_install $missing; fi

# ---------------------------------------------------------------- image (kernel + initramfs), built once
MODS="virtio_pci virtio_net 9pnet_virtio 9p overlay crc32_generic rdma_rxe ib_uverbs ib_umad rdma_ucm veth dummy"
IMG_REV=1    # bump when the initramfs recipe below changes
mkdir -p "$CACHE"
exec 9> "$CACHE/.lock"; flock 9          # one image build at a time; runs themselves are independent
KVER=
if [ -f "$CACHE/current" ]; then KVER=$(cat "$CACHE/current"); fi
if [ -z "$KVER" ] || [ ! -f "$CACHE/$KVER/ready" ] || [ "$(cat "$CACHE/$KVER/ready")" != "$IMG_REV" ]; then
  t0=$(date +%s)
  resolve() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
  pkg=$(resolve)
  if [ -z "$pkg" ]; then apt_update_once; pkg=$(resolve); fi
  [ -n "$pkg" ] || die "cannot resolve linux-image-amd64 to a kernel package"
  KVER=${pkg#linux-image-}
  D=$CACHE/$KVER
  say "building VM image for kernel $KVER in $D"
  rm -rf "$D"; mkdir -p "$D/dl"; chmod 777 "$D/dl"
  (cd "$D/dl" && apt-get download "$pkg" >&2) || { apt_update_once; (cd "$D/dl" && apt-get download "$pkg" >&2); } ||
    die "apt-get download $pkg failed"
  dpkg-deb -x "$D"/dl/*.deb "$D/kroot"
  depmod -b "$D/kroot" "$KVER"
  S=$D/initramfs; mkdir -p "$S"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,lower,upper,newroot,etc,lib/modules/$KVER}
  cp /bin/busybox "$S/bin/busybox"
  for m in $MODS; do
    modprobe -d "$D/kroot" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}' | while read -r ko; do
      rel=${ko#"$D/kroot/"}; mkdir -p "$S/$(dirname "$rel")"; cp -n "$ko" "$S/$rel"; done
  done
  cp "$D/kroot/lib/modules/$KVER/modules.order" "$D/kroot/lib/modules/$KVER/modules.builtin"* "$S/lib/modules/$KVER/"
  depmod -b "$S" "$KVER"
  echo "$MODS" > "$S/etc/vm-modules"
  cat > "$S/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
fail() { echo "[vm-init] FAILED: $*"; echo 125 > /rc.failed; reboot -f; sleep 5; }
echo "[vm-init] $(cut -d' ' -f1 /proc/uptime)s: kernel up, loading modules"
for m in $(cat /etc/vm-modules); do modprobe "$m" || echo "[vm-init] modprobe $m failed"; done
O9P="trans=virtio,version=9p2000.L,msize=524288"
mount -t 9p -o "$O9P,ro,cache=loose" hostroot /lower || fail "9p mount of host /"
mount -t tmpfs -o mode=755 tmpfs /upper && mkdir -p /upper/u /upper/w
R=/newroot
mount -t overlay overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w $R || fail "overlay"
mount -t proc proc $R/proc; mount -t sysfs sysfs $R/sys; mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm; mount -t devpts devpts $R/dev/pts; mount -t tmpfs tmpfs $R/dev/shm
mount -t tmpfs -o mode=1777 tmpfs $R/tmp; mount -t tmpfs -o mode=755 tmpfs $R/run
mkdir -p $R/run/vmctl; mount -t 9p -o "$O9P,cache=none" ctl $R/run/vmctl || fail "9p mount of ctl"
SHARE=$(cat $R/run/vmctl/share_path)
mkdir -p "$R$SHARE"; mount -t 9p -o "$O9P,cache=mmap" share "$R$SHARE" || fail "9p mount of $SHARE"
mkdir -p $R/lib/modules && mount --bind /lib/modules $R/lib/modules
stty -F /dev/ttyS1 raw -echo 2>/dev/null
echo "[vm-init] $(cut -d' ' -f1 /proc/uptime)s: root ready, running guest.sh"
chroot $R /bin/bash /run/vmctl/guest.sh < /dev/null > /dev/ttyS1 2>&1
rc=$?
echo $rc > $R/run/vmctl/rc
sync
echo "[vm-init] $(cut -d' ' -f1 /proc/uptime)s: guest.sh exit $rc, powering off"
umount $R$SHARE $R/run/vmctl 2>/dev/null
reboot -f
INIT
  chmod +x "$S/init"
  (cd "$S" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$D/initrd.img"
  cp "$D/kroot/boot/vmlinuz-$KVER" "$D/vmlinuz"
  rm -rf "$D/dl" "$D/kroot"   # the unpacked kernel (~420 MB) is only needed to build the initramfs
  echo "$IMG_REV" > "$D/ready"; echo "$KVER" > "$CACHE/current"
  say "image built in $(( $(date +%s) - t0 )) s"
fi
D=$CACHE/$KVER
exec 9>&-

# ---------------------------------------------------------------- per-run control folder
RUN=$(mktemp -d /tmp/rdma-vm-run.XXXXXX)
cleanup() { [ -n "${RDMA_VM_KEEP:-}" ] && say "run folder kept: $RUN" || rm -rf "$RUN"; }
trap cleanup EXIT
printf '%s\n' "$SHARE" > "$RUN/share_path"
if [ $# -eq 1 ]; then CMD=$1; else CMD=$(printf '%q ' "$@"); fi
printf 'cd %q || exit 125\n%s\n' "$SHARE" "$CMD" > "$RUN/cmd.sh"
cat > "$RUN/guest.sh" <<GUEST
#!/bin/bash
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb LANG=C.UTF-8
export RDMA_VM=1
TOPO=$TOPO
GUEST
cat >> "$RUN/guest.sh" <<'GUEST'
# Every fork+exec costs ~0.1-0.5 s under TCG, so this uses bash builtins, /proc/sys writes and ip -batch.
read -r t0 _ < /proc/uptime
gid_index() {  # first RoCE v2 GID of port 1 that is an IPv4-mapped address
  local f i g t
  for f in /sys/class/infiniband/$1/ports/1/gids/*; do
    i=${f##*/}; read -r g < "$f" 2>/dev/null || continue
    [[ $g == 0000:0000:0000:0000:0000:ffff:* ]] || continue
    read -r t < /sys/class/infiniband/$1/ports/1/gid_attrs/types/$i 2>/dev/null || continue
    [[ $t == "RoCE v2" ]] && { echo "$i"; return 0; }
  done
  return 1
}
wait_gid() { local n; for ((n = 0; n < 200; n++)); do gid_index "$1" > /dev/null && return 0; sleep 0.05; done
  echo "[guest] no RoCE v2 IPv4 GID on $1" >&2; return 1; }
trap 'echo "[guest] RDMA setup failed at line $LINENO: $BASH_COMMAND" >&2; exit 125' ERR
set -e
echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter; echo 0 > /proc/sys/net/ipv4/conf/default/rp_filter
echo 1 > /proc/sys/net/ipv4/conf/all/accept_local
# rxe turns a large write into a burst of MTU-sized packets; the default backlog (1000) drops
# part of a burst through the veth, and each drop stalls the QP for a retry timeout.
echo 10000 > /proc/sys/net/core/netdev_max_backlog
{ echo "link set lo up"
  if [ "$TOPO" != none ]; then
    echo "link add rdma0 type dummy"; echo "addr add 192.168.77.1/24 dev rdma0"; echo "link set rdma0 up"; fi
  if [ "$TOPO" = pair ]; then
    echo "link add va type veth peer name vb"
    echo "addr add 192.168.78.1/24 dev va"; echo "addr add 192.168.78.2/24 dev vb"
    echo "link set va up"; echo "link set vb up"
    # make locally generated traffic to the peer address leave through the veth instead of lo
    echo "rule add pref 100 iif lo to 192.168.78.2 lookup 100"; echo "route add 192.168.78.2 dev va src 192.168.78.1 table 100"
    echo "rule add pref 101 iif lo to 192.168.78.1 lookup 101"; echo "route add 192.168.78.1 dev vb src 192.168.78.2 table 101"
    echo "rule add pref 1000 lookup local"; echo "rule del pref 0"
  fi; } | ip -batch -
if [ "$TOPO" = pair ]; then
  for x in va vb; do echo 0 > /proc/sys/net/ipv4/conf/$x/rp_filter; echo 1 > /proc/sys/net/ipv4/conf/$x/accept_local; done
fi
if [ "$TOPO" != none ]; then
  { echo "link add rxe0 type rxe netdev rdma0"
    if [ "$TOPO" = pair ]; then echo "link add rxe_a type rxe netdev va"; echo "link add rxe_b type rxe netdev vb"; fi
  } | rdma -b -
  wait_gid rxe0
  export RDMA_DEV=rxe0 RDMA_GID_INDEX=$(gid_index rxe0)
fi
if [ "$TOPO" = pair ]; then
  wait_gid rxe_a; wait_gid rxe_b
  export RDMA_DEV_A=rxe_a RDMA_DEV_B=rxe_b RDMA_IP_A=192.168.78.1 RDMA_IP_B=192.168.78.2
  export RDMA_GID_INDEX_A=$(gid_index rxe_a) RDMA_GID_INDEX_B=$(gid_index rxe_b)
  export RDMA_NETDEV_A=va RDMA_NETDEV_B=vb RDMA_VM_RELINK=/run/rdma_vm_relink.sh
  # For the tests that take the link down: up again, with the routes the kernel dropped
  # when it went down, and both ports ACTIVE with their RoCE v2 IPv4 GID.
  cat > "$RDMA_VM_RELINK" <<'RELINK'
#!/bin/bash
{ echo "link set va up"; echo "link set vb up"
  echo "route replace 192.168.78.2 dev va src 192.168.78.1 table 100"
  echo "route replace 192.168.78.1 dev vb src 192.168.78.2 table 101"; } | ip -batch - || exit 1
for ((n = 0; n < 400; n++)); do
  ok=1
  for d in rxe_a rxe_b; do
    read -r state < /sys/class/infiniband/$d/ports/1/state
    [[ $state == *ACTIVE* ]] || ok=0
  done
  read -r ga < /sys/class/infiniband/rxe_a/ports/1/gids/$RDMA_GID_INDEX_A
  read -r gb < /sys/class/infiniband/rxe_b/ports/1/gids/$RDMA_GID_INDEX_B
  [[ $ga == 0000:0000:0000:0000:0000:ffff:* && $gb == 0000:0000:0000:0000:0000:ffff:* ]] || ok=0
  [ $ok = 1 ] && exit 0
  sleep 0.05
done
echo "rdma_vm relink: rxe_a/rxe_b not ACTIVE with their GIDs after 20 s" >&2; exit 1
RELINK
  chmod +x "$RDMA_VM_RELINK"
fi
set +e; trap - ERR
read -r t1 _ < /proc/uptime
devs=$(echo /sys/class/infiniband/*); devs=${devs//\/sys\/class\/infiniband\//}
echo "[guest] rdma setup ($TOPO) took $t0 -> $t1 s (guest uptime); devices: $devs" >&2
bash /run/vmctl/cmd.sh
GUEST

# ---------------------------------------------------------------- boot
case "$ACCEL" in
  kvm) ACC=(-accel kvm -cpu host,-arch-capabilities) ;;
  *)   ACC=(-accel tcg,thread=multi -cpu max) ;;
esac
say "booting VM ($ACCEL, $SMP vCPU, $MEM MiB, kernel $KVER, topo $TOPO), sharing $SHARE"
t0=$(date +%s)
set +e
timeout --foreground -k 10 "$TIMEOUT" qemu-system-x86_64 "${ACC[@]}" -m "$MEM" -smp "$SMP" \
  -nodefaults -no-reboot -display none -no-user-config \
  -kernel "$D/vmlinuz" -initrd "$D/initrd.img" \
  -append "console=ttyS0 panic=-1 quiet loglevel=4 mitigations=off tsc=reliable" \
  -serial "file:$RUN/console.log" \
  -chardev stdio,id=out,signal=off -serial chardev:out \
  -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
  -virtfs "local,path=$SHARE,mount_tag=share,security_model=none,multidevs=remap" \
  -virtfs "local,path=$RUN,mount_tag=ctl,security_model=none" \
  < /dev/null
qrc=$?
set -e
say "VM exited (qemu rc $qrc) after $(( $(date +%s) - t0 )) s"
if [ $qrc -eq 124 ] || [ $qrc -eq 137 ]; then
  echo "[rdma_vm] TIMEOUT after $TIMEOUT s; console tail:" >&2; tail -n 30 "$RUN/console.log" >&2; exit 124
fi
if [ ! -f "$RUN/rc" ]; then
  echo "[rdma_vm] VM ended without an exit status; console tail:" >&2; tail -n 40 "$RUN/console.log" >&2; exit 125
fi
rc=$(cat "$RUN/rc")
[ -z "${RDMA_VM_SHOW_CONSOLE:-}" ] || cat "$RUN/console.log" >&2
exit "$rc"
