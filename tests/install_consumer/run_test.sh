#!/usr/bin/env bash
# ctest install_consumer_test: gyre as a user outside this tree gets it.
#
#   run_test.sh BUILD_DIR WORK_DIR CXX LAUNCHER SANITIZE VERSION
#
# 1. `cmake --install BUILD_DIR --prefix WORK_DIR/prefix`; the install tree has the
#    headers (the generated base/version.h too), libraries, tools, packages and the
#    licence, and the shared libraries export only their public API (nm -D against an
#    allow-list: a new export is a decision, not an accident).
# 2. A copy of this folder's consumer project (CMakeLists.txt, consumer.cc) configured with
#    find_package(gyre VERSION) against the prefix (gyre_VERSION and gyre_LICENSE checked),
#    built static (gyre::gyre) and shared (gyre::gyre_shared), both run (2 ranks, results
#    checked exactly, gyre::version() against the header: consumer.cc).
# 3. consumer.cc compiled with only `pkg-config --cflags --libs gyre`, and run; gyre.pc's
#    Version is VERSION and its License BSD-3-Clause.
# 4. libgyre_c.so from Python ctypes (ctypes_check.py, gyreGetVersion against VERSION);
#    in the ASan build with the sanitizer runtimes preloaded, skipped in the TSan build.
# WORK_DIR is emptied first and kept afterwards for a look at what failed.
set -euo pipefail
build=$1 work=$2 cxx=$3 launcher=${4:-} sanitize=${5:-} expected=${6:?the project version}
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "install_consumer_test: FAILED: $*" >&2; exit 1; }
step() { echo "== $*"; }

case "$sanitize" in
  "") sanflags="" ;;
  address) sanflags="-fsanitize=address,undefined" ;;
  thread) sanflags="-fsanitize=thread" ;;
  *) fail "unknown sanitizer '$sanitize'" ;;
esac

rm -rf "$work"
mkdir -p "$work/src"
prefix=$work/prefix

step "cmake --install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || fail "install (see $work/install.log)"
so=$(find "$prefix" -name libgyre.so -print -quit)
[ -n "$so" ] || fail "no libgyre.so installed"
libdir=$(dirname "$so")
for f in include/gyre/ring/communicator.h include/gyre/ring/spawn.h include/gyre/store/tcp_store.h \
         include/gyre/base/export.h include/gyre/base/version.h include/gyre/ddp/grad_sync.h \
         include/gyre/capi/gyre.h include/gyre/capi/gyre_cuda.h bin/gyrerun bin/gyre-store share/doc/gyre/LICENSE; do
  [ -e "$prefix/$f" ] || fail "$f was not installed"
done
for f in libgyre_base.a libgyre_ring.a libgyre_ddp.a libgyre_c.a libgyre_c.so cmake/gyre/gyreConfig.cmake \
         cmake/gyre/gyreConfigVersion.cmake cmake/gyre/gyreTargets.cmake pkgconfig/gyre.pc; do
  [ -e "$libdir/$f" ] || fail "$libdir/$f was not installed"
done
echo "installed: $(cd "$prefix" && find . -type f | wc -l) files; $(cd "$prefix" && ls bin | tr '\n' ' ')"

step "exports"
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ "$soname" =~ ^libgyre\.so\.[0-9]+(\.[0-9]+)?$ ]] || fail "libgyre.so SONAME is '$soname'"
exports=$(nm -D --defined-only "$so" | awk '{print $3}' | c++filt)
allowed='^(gyre::(Communicator|Work|Error|Store|PrefixStore|TcpStore|Fd|SocketAddress|Options)::'
allowed+='|gyre::(spawn|errorCodeName|errorCodeFromInt|errorCauseName|failSystem|dtypeSize|isFloating|dtypeName|opName|logEnabled'
allowed+='|logLine|globalOptions|algoName|parseAlgo|algoChoices|transportName|parseByteSize|version|versionCommit)(\[abi:cxx11\])?\('
allowed+='|(typeinfo|typeinfo name|vtable) for gyre::(Error|Store|PrefixStore|TcpStore)$)'
stray=$(grep -Ev "$allowed" <<<"$exports" || true)
[ -z "$stray" ] || fail "libgyre.so exports more than the public API:"$'\n'"$stray"
! grep -q 'Communicator::Impl::' <<<"$exports" || fail "libgyre.so exports Communicator::Impl"
grep -q '^gyre::Communicator::create(' <<<"$exports" || fail "libgyre.so lacks Communicator::create"
echo "libgyre.so: SONAME $soname, $(wc -l <<<"$exports") symbols, all in the public API"
c_exports=$(nm -D --defined-only "$libdir/libgyre_c.so" | awk '{print $3}')
c_stray=$(grep -Ev '^gyre[A-Z][A-Za-z]*$' <<<"$c_exports" || true)
[ -z "$c_stray" ] || fail "libgyre_c.so exports more than the C API:"$'\n'"$c_stray"
for f in gyreAllReduce gyreGetVersion gyreCudaCommCreate gyreCudaAllReduce; do
  grep -qx $f <<<"$c_exports" || fail "libgyre_c.so lacks $f"
done
# The CUDA runtime it carries (static, hidden) must not make it need libcudart.so.
! readelf -d "$libdir/libgyre_c.so" | grep -q 'NEEDED.*libcudart' ||
  fail "libgyre_c.so needs libcudart.so: $(readelf -d "$libdir/libgyre_c.so" | grep NEEDED)"
echo "libgyre_c.so: $(wc -l <<<"$c_exports") symbols, all gyre* C functions"

step "find_package(gyre) consumer"
cp "$here/CMakeLists.txt" "$here/consumer.cc" "$work/src/"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$work/src" -B "$work/consumer" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" -DGYRE_EXPECTED_VERSION="$expected" \
  ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"} \
  -DCMAKE_CXX_FLAGS="$sanflags" -DCMAKE_EXE_LINKER_FLAGS="$sanflags" \
  >"$work/configure.log" || fail "consumer configure (see $work/configure.log)"
found=$(sed -n 's/^gyre_DIR:PATH=//p' "$work/consumer/CMakeCache.txt")
[ "$found" = "$libdir/cmake/gyre" ] || fail "find_package found gyre in '$found', not the install tree"
cmake --build "$work/consumer" >"$work/build.log" || fail "consumer build (see $work/build.log)"
readelf -d "$work/consumer/consumer_shared" | grep -q "NEEDED.*\[$soname\]" \
  || fail "consumer_shared does not load $soname"
! readelf -d "$work/consumer/consumer_static" | grep -q 'NEEDED.*libgyre' \
  || fail "consumer_static loads a shared gyre"
echo -n "static: " && "$work/consumer/consumer_static"
echo -n "shared: " && "$work/consumer/consumer_shared"

step "pkg-config consumer"
export PKG_CONFIG_PATH=$libdir/pkgconfig
version=$(pkg-config --modversion gyre) || fail "pkg-config does not find gyre.pc"
[ "$version" = "$expected" ] || fail "gyre.pc says version $version, not $expected"
grep -qx 'License: BSD-3-Clause' "$libdir/pkgconfig/gyre.pc" || fail "gyre.pc names no licence"
read -r -a pc_cflags <<<"$(pkg-config --cflags gyre)"
read -r -a pc_libs <<<"$(pkg-config --libs gyre)"
# shellcheck disable=SC2086  # $launcher and $sanflags are empty or one word each
$launcher "$cxx" -std=c++20 -O1 $sanflags "${pc_cflags[@]}" "$work/src/consumer.cc" \
  -o "$work/consumer_pc" "${pc_libs[@]}" -Wl,-rpath,"$libdir" \
  || fail "compile with pkg-config --cflags --libs gyre ($version)"
readelf -d "$work/consumer_pc" | grep -q "NEEDED.*\[$soname\]" || fail "consumer_pc does not load $soname"
echo -n "pkg-config gyre $version: " && "$work/consumer_pc"

step "ctypes"
command -v python3 >/dev/null || fail "python3 is missing (tools/setup.sh installs it)"
case "$sanitize" in
  "") python3 "$here/ctypes_check.py" "$libdir/libgyre_c.so" "$expected" ;;
  address)
    # An uninstrumented python loads the sanitized library only with the runtimes
    # preloaded; python's own allocations are not ours to leak-check.
    preload="$("$cxx" -print-file-name=libasan.so) $("$cxx" -print-file-name=libubsan.so)"
    LD_PRELOAD=$preload ASAN_OPTIONS=detect_leaks=0 python3 "$here/ctypes_check.py" \
      "$libdir/libgyre_c.so" "$expected" ;;
  thread) echo "skipped in the thread sanitizer build (python under TSan is not tried)" ;;
esac
echo "install_consumer_test: passed"
