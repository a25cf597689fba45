#!/usr/bin/env bash
# docs/install.md's plain install and the README's two commands on a brand-new Debian 12
# machine: proves that the page's package list and the project's own scripts install
# everything they need, which a test run on a development machine (where packages
# installed by hand stay) cannot see.
#
#   tools/fresh_machine_test.sh [COMMIT]        default: HEAD (committed work only)
#   GYRE_FRESH_STEPS=plain tools/fresh_machine_test.sh    only some steps (a comma list;
#                                                         default plain,demo,build,ctest)
#
# What it does, each step named in its output and, on failure, in its last line:
#   root    a minimal Debian 12 root (mmdebstrap --variant=minbase, what containers and
#           cloud images are; made once, ~20 s, kept as a tarball in the cache) unpacked
#           into a new folder, the commit cloned into /src (always)
#   plain   a user's install by docs/install.md, without our scripts, in the clean root:
#           apt-get install --no-install-recommends of exactly its library block (the
#           packages `tools/setup.sh --list library` reads from it), the plain build
#           (cmake -DGYRE_BUILD_TESTS=OFF -DGYRE_BUILD_BENCH=OFF, Makefiles, no ccache) in
#           /src/build-plain, `cmake --install` to /opt/gyre, then tests/install_consumer's
#           project built through find_package(gyre) against /opt/gyre, static and shared,
#           each running 2 ranks whose all-reduce results it checks exactly
#   demo    tools/demo.sh in full (install, build, gyre-bench, gyre-train, DDP on gyre
#           and gloo), which must end with the DDP line of each backend
#   build   the install and build steps of tools/test.sh's suite stage (tools/test.sh
#           --build-only --stages suite: setup.sh, the PyPI torch venv, the build)
#   ctest   the suite's entries that depend on installed programs rather than on gyre's
#           code, which the host suite already covers (GYRE_FRESH_CTEST, a ctest -R
#           regex; see `entries` below for the set and why)
# The root runs in its own mount and PID namespaces (unshare): its mounts (/proc, /sys,
# /dev, the caches) and every process it started (slurmd, QEMU, ranks) end with it, even
# when this script is killed; the folder is removed afterwards (GYRE_FRESH_KEEP=1 keeps
# it). The environment inside is clean: HOME=/root, a plain PATH, nothing inherited.
#
# Cache (GYRE_FRESH_CACHE, default /var/tmp/gyre-fresh), bind-mounted into the root so
# that a second run costs minutes, not a download: the minbase tarball, apt's .deb files,
# pip's wheels (the PyPI torch line is ~3 GB), ccache's objects and the rdma VM's kernel.
# None of them installs anything: a package missing from tools/setup.sh is still missing.
# GYRE_FRESH_COLD=1 starts with empty caches (a first run on a new machine).
#
# Proving it can fail: GYRE_FRESH_DROP_PACKAGE=NAME removes NAME from tools/setup.sh's
# lists and from docs/install.md's library block inside the root before anything runs
# (e.g. libfmt-dev: step plain fails on CMake's "Could not find ... fmt"; pybind11-dev:
# step demo fails; the lines that name what is missing are printed).
#
# Needs root (mounts, chroot); exits 77 (ctest's skip), saying why, where it cannot run,
# unless GYRE_REQUIRE_FRESH=1 (then 1). Logs: $GYRE_FRESH_CACHE/logs/<step>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
proj=$PWD
commit=$(git rev-parse --verify "${1:-HEAD}^{commit}")
cache=${GYRE_FRESH_CACHE:-/var/tmp/gyre-fresh}
logs=$cache/logs   # kept after a cold run too
# The ctest entries run inside (each needs something only an install step provides; the
# rest of the suite tests gyre's own code, which the suite stage covers on the host):
#   torch_pip_install_debian   `pip install ./python` against Debian's torch: pip, venv,
#                              setuptools, pybind11 and the c10d headers from apt
#   OpenMpi.OneHostGyreBench   mpirun from openmpi-bin
#   rdma_vm                    QEMU, busybox, kmod, cpio, the kernel package, rdma-core:
#                              boots the soft-RoCE VM and runs the rdma tests in it
# The demo has built gyre_torch against Debian's torch and trained with it; the build step
# has made the PyPI torch venv (tools/torch_venv.sh). torch_pip_install_pypi is left out:
# PyPI's wheel brings its own headers, so it depends on no apt package the Debian line
# does not, and it would add ~5 minutes.
#   Slurm.SrunRunsGyreBench... slurmctld, slurmd and srun from slurm-wlm (tools/slurm_local.sh)
entries=${GYRE_FRESH_CTEST:-'^(torch_pip_install_debian|OpenMpi\.OneHostGyreBenchAndGyreTrain|Slurm\.SrunRunsGyreBenchAndGyreTrain|rdma_vm)$'}
expected=${GYRE_FRESH_CTEST_COUNT:-4}
steps=${GYRE_FRESH_STEPS:-plain,demo,build,ctest}
for s in ${steps//,/ }; do
  case $s in plain|demo|build|ctest) ;;
    *) echo "fresh_machine_test: unknown step '$s' (plain, demo, build, ctest)" >&2; exit 2 ;;
  esac
done

say() { echo "fresh_machine_test: [$(date +%T)] $*" >&2; }
skip() {
  say "SKIPPED: $*"
  [ "${GYRE_REQUIRE_FRESH:-0}" = 1 ] && exit 1
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (mounts and chroot); run it as root or with sudo"
command -v unshare >/dev/null || skip "unshare (util-linux) is missing"
if ! command -v mmdebstrap >/dev/null; then
  say "installing mmdebstrap"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >&2 ||
    skip "mmdebstrap is missing and could not be installed"
fi

if [ "${GYRE_FRESH_COLD:-0}" = 1 ]; then
  cache=$(mktemp -d /var/tmp/gyre-fresh-cold.XXXXXX)
  say "cold run: empty caches in $cache"
fi
mkdir -p "$cache"/{debs,pip,ccache,rdma-vm} "$logs"
exec 8>"$logs/.lock"
flock -w 3600 8 || { say "FAILED at step root: another fresh_machine_test holds $logs/.lock"; exit 1; }
rm -f "$logs"/*.log

tar=$cache/bookworm-minbase.tar
if [ ! -s "$tar" ]; then
  say "step root: mmdebstrap --variant=minbase bookworm (once)"
  # (mmdebstrap picks its output format by the name's extension: .tar for a tarball.)
  mmdebstrap --quiet --variant=minbase bookworm "$cache/partial-minbase.tar" >"$logs/root.log" 2>&1 ||
    { tail -20 "$logs/root.log" >&2; say "FAILED at step root: mmdebstrap"; exit 1; }
  mv "$cache/partial-minbase.tar" "$tar"
fi
root=$(mktemp -d /var/tmp/gyre-fresh-root.XXXXXX)
cleanup() {
  if [ "${GYRE_FRESH_KEEP:-0}" = 1 ]; then say "root kept at $root"; else rm -rf "$root"; fi
  if [ "${GYRE_FRESH_COLD:-0}" = 1 ]; then rm -rf "$cache"; fi
}
trap cleanup EXIT
tar -C "$root" -xf "$tar"
# The machine's network setup, as a new machine on the same network would be given it:
# the resolver, and the certificate authorities and pip settings that an egress proxy
# needs (none of it is a package: Debian's ca-certificates, which setup.sh installs,
# adds these authorities to its bundle).
cp /etc/resolv.conf "$root/etc/resolv.conf"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$root/etc/pip.conf"
# The host's name must resolve inside, as on any installed machine (Slurm names its node
# after it; mpirun and the store use it).
grep -q "[[:space:]]$(hostname)\([[:space:]]\|$\)" "$root/etc/hosts" 2>/dev/null ||
  echo "127.0.1.1 $(hostname)" >>"$root/etc/hosts"
echo 'Binary::apt::APT::Keep-Downloaded-Packages "true";' >"$root/etc/apt/apt.conf.d/99keep"
git clone -q --no-checkout "$proj" "$root/src"
git -C "$root/src" checkout -q "$commit"
if [ -n "${GYRE_FRESH_DROP_PACKAGE:-}" ]; then
  drop=${GYRE_FRESH_DROP_PACKAGE}
  say "dropping $drop from tools/setup.sh's lists and docs/install.md's library block (a check that this test fails)"
  bash "$root/src/tools/setup.sh" --list test | grep -xF -- "$drop" >/dev/null ||
    { say "FAILED at step root: $drop is in none of the lists (tools/setup.sh --list test)"; exit 1; }
  re="(^|[[:space:]])$(sed 's/[.+]/\\&/g' <<<"$drop")([[:space:]]|$)"
  sed -i -E "s/$re/\1\2/" "$root/src/tools/setup.sh"
  # In install.md only between the marker and its block's closing fence.
  range=$(awk '/<!-- prerequisites:library -->/ { m = NR } m && /^```/ && ++f == 2 { print m "," NR; exit }' \
            "$root/src/docs/install.md")
  [ -n "$range" ] || { say "FAILED at step root: no marked library block in docs/install.md"; exit 1; }
  sed -i -E "${range}s/$re/\1\2/" "$root/src/docs/install.md"
  ! bash "$root/src/tools/setup.sh" --list test | grep -xF -- "$drop" >/dev/null ||
    { say "FAILED at step root: $drop is still listed after dropping it"; exit 1; }
fi

# Step plain, run inside the root: what docs/install.md tells a user, and nothing of
# tools/ but the list it reads from the page.
cat >"$root/fresh-plain.sh" <<'EOF'
set -euo pipefail
cd /src
packages=$(tools/setup.sh --list library | tr '\n' ' ')
echo "== docs/install.md's library prerequisites: $packages"
apt-get update -qq
# shellcheck disable=SC2086  # one word a package
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages
echo "== the plain build"
cmake -S . -B build-plain -DGYRE_BUILD_TESTS=OFF -DGYRE_BUILD_BENCH=OFF
cmake --build build-plain -j "$(nproc)"
cmake --install build-plain --prefix /opt/gyre
echo "== a project of its own: find_package(gyre) with CMAKE_PREFIX_PATH=/opt/gyre"
mkdir -p /tmp/consumer-src
cp tests/install_consumer/CMakeLists.txt tests/install_consumer/consumer.cc /tmp/consumer-src/
# The version it must find: the one project() in CMakeLists.txt defines.
version=$(sed -n 's/^project(gyre VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
cmake -S /tmp/consumer-src -B /tmp/consumer -DCMAKE_PREFIX_PATH=/opt/gyre \
  -DGYRE_EXPECTED_VERSION="$version"
found=$(sed -n 's/^gyre_DIR:PATH=//p' /tmp/consumer/CMakeCache.txt)
case $found in /opt/gyre/*) ;; *) echo "find_package found gyre in '$found', not /opt/gyre"; exit 1 ;; esac
cmake --build /tmp/consumer -j "$(nproc)"
# consumer.cc checks every value itself (2 ranks: an all-reduce sum and an async max
# exact, a bad root rejected) and prints this line only when all passed.
# (the commit is "unknown" here: the library's prerequisites bring no git).
want="consumer: gyre $version (commit *), 2 ranks, allReduce sum and async max exact, bad root rejected"
for target in static:gyre::gyre shared:gyre::gyre_shared; do
  kind=${target%%:*}
  got=$(timeout 120 /tmp/consumer/consumer_$kind)
  # shellcheck disable=SC2053  # $want is a pattern: any commit
  [[ $got == $want ]] || { echo "consumer_$kind printed '$got', not '$want'"; exit 1; }
  echo "plain: consumer_$kind (${target#*:}): $got"
done
EOF

# The steps, run inside the root by bash (one script, so one namespace holds them all).
cat >"$root/fresh-steps.sh" <<'EOF'
set -uo pipefail
cd /src
export CCACHE_DIR=/root/.cache/ccache
step() {   # step NAME COMMAND...: runs it, logs it, names it on failure
  local name=$1 t0=$SECONDS; shift
  echo "fresh_machine_test: [$(date +%T)] step $name: $*" >&2
  if ! "$@" >"/fresh-logs/$name.log" 2>&1; then
    echo "---- last lines of step $name ----" >&2
    tail -40 "/fresh-logs/$name.log" >&2
    echo "---- what its log says is missing ----" >&2
    grep -E "No such file or directory|No module named|command not found|not found|Unable to locate package|Could NOT find|Could not find|could be found|unable to find|COMPILER not set|cannot find -l" \
      "/fresh-logs/$name.log" | grep -v '^--' | sort -u | head -20 >&2
    echo "fresh_machine_test: FAILED at step $name ($* exited non-zero after $((SECONDS - t0)) s; log: $name.log)" >&2
    exit 1
  fi
  echo "fresh_machine_test: [$(date +%T)] step $name ok ($((SECONDS - t0)) s)" >&2
}
want() { [[ ",$FRESH_STEPS," == *",$1,"* ]]; }
if want plain; then
  step plain bash /fresh-plain.sh
  grep "^plain: " /fresh-logs/plain.log >&2
fi
if want demo; then
  step demo tools/demo.sh
  for backend in gyre gloo; do
    grep -qE "^$backend: [0-9]+ samples/s, test accuracy" /fresh-logs/demo.log || {
      echo "fresh_machine_test: FAILED at step demo: it did not end with the DDP line for $backend" >&2
      tail -20 /fresh-logs/demo.log >&2; exit 1; }
  done
  grep -E "^(gyre|gloo): [0-9]+ samples/s" /fresh-logs/demo.log >&2
fi
if want build; then
  step build tools/test.sh --build-only --stages suite
fi
if want ctest; then
  step ctest bash -c "cd build && GYRE_REQUIRE_RDMA=1 ctest --output-on-failure --timeout 1500 -R '$FRESH_CTEST'"
  grep -E "tests passed|tests failed" /fresh-logs/ctest.log >&2
  n=$(grep -cE "^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed" /fresh-logs/ctest.log || true)
  [ "$n" -ge "$FRESH_EXPECTED" ] || { echo "fresh_machine_test: FAILED at step ctest: $n entries passed, expected $FRESH_EXPECTED (the -R set matched fewer?)" >&2; exit 1; }
fi
exit 0
EOF

say "commit $(git log -1 --format='%h %s' "$commit" | cut -c1-80)"
t0=$SECONDS
# Interrupted (ctest's timeout, ^C): unshare dies, and --kill-child takes the root's PID 1
# with it, which ends every process inside.
child=
stop() {
  say "interrupted: stopping everything inside the root"
  [ -n "$child" ] && kill -KILL "$child" 2>/dev/null && wait "$child" 2>/dev/null
  exit 130
}
trap stop INT TERM HUP
set +e
unshare --kill-child --mount --pid --fork --propagation private /bin/bash -c '
  set -e
  root=$1 cache=$2 logs=$4
  mount -t proc proc "$root/proc"
  mount -t sysfs sysfs "$root/sys"
  mount --rbind /dev "$root/dev"
  # The cgroup file system, as every booted machine has it (slurmd will not start without).
  [ -d /sys/fs/cgroup ] && mount --rbind /sys/fs/cgroup "$root/sys/fs/cgroup"
  mkdir -p "$root/var/cache/apt/archives" "$root/root/.cache/pip" "$root/root/.cache/ccache" \
           "$root/var/tmp/gyre-rdma-vm" "$root/fresh-logs"
  mount --bind "$cache/debs" "$root/var/cache/apt/archives"
  mount --bind "$cache/pip" "$root/root/.cache/pip"
  mount --bind "$cache/ccache" "$root/root/.cache/ccache"
  mount --bind "$cache/rdma-vm" "$root/var/tmp/gyre-rdma-vm"
  mount --bind "$logs" "$root/fresh-logs"
  exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    FRESH_CTEST="$3" FRESH_EXPECTED="$5" FRESH_STEPS="$6" /bin/bash /fresh-steps.sh
' fresh "$root" "$cache" "$entries" "$logs" "$expected" "$steps" &
child=$!
wait "$child"
rc=$?
set -e
if [ $rc -eq 0 ]; then
  say "passed in $((SECONDS - t0)) s (steps $steps on a fresh Debian 12 root)"
else
  say "FAILED (exit $rc) after $((SECONDS - t0)) s; logs in $logs"
fi
exit $rc
