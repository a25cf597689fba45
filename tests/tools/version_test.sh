#!/usr/bin/env bash
# ctest version_test: every program and API of the build says the one version, the
# top-level CMakeLists.txt's project(gyre VERSION ...).
#
#   version_test.sh VERSION VERSION_CHECK PROGRAM...
#
# VERSION: CMake's PROJECT_VERSION. VERSION_CHECK (tests/version_check.c) prints the C
# header's GYRE_VERSION_STRING and GYRE_VERSION_CODE and the library's gyreGetVersion:
# all three must match VERSION (the code as major * 10000 + minor * 100 + patch). Each
# PROGRAM's --version must print exactly "<its name> VERSION (commit C)", exit 0, with one
# C for all of them (a short hash, "-dirty" after it, or "unknown"), and its --help must
# name --version. (gyre_torch.__version__: ctest torch_version_<line>, python/CMakeLists.txt.)
set -euo pipefail
expected=$1 check=$2
shift 2
fail() { echo "version_test: FAILED: $*" >&2; exit 1; }

[[ "$expected" =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] || fail "VERSION '$expected' is not X.Y.Z"
code=$((BASH_REMATCH[1] * 10000 + BASH_REMATCH[2] * 100 + BASH_REMATCH[3]))

line=$("$check") || fail "version_check exited $?"
read -r header_string header_code library_code <<<"$line"
[ "$header_string" = "$expected" ] || fail "GYRE_VERSION_STRING is $header_string, not $expected"
[ "$header_code" = "$code" ] || fail "GYRE_VERSION_CODE is $header_code, not $code"
[ "$library_code" = "$code" ] || fail "gyreGetVersion gives $library_code, not $code"
echo "capi/gyre.h: GYRE_VERSION_STRING $header_string, GYRE_VERSION_CODE $header_code; gyreGetVersion $library_code"

[ $# -gt 0 ] || fail "no programs given"
commit=""
for program in "$@"; do
  name=$(basename "$program")
  out=$("$program" --version) || fail "$name --version exited $?"
  pattern="^$name ([^ ]+) \(commit ([0-9a-f]+(-dirty)?|unknown)\)$"
  [[ "$out" =~ $pattern ]] || fail "$name --version printed '$out'"
  [ "${BASH_REMATCH[1]}" = "$expected" ] || fail "$name says version ${BASH_REMATCH[1]}, not $expected"
  if [ -z "$commit" ]; then
    commit=${BASH_REMATCH[2]}
  elif [ "${BASH_REMATCH[2]}" != "$commit" ]; then
    fail "$name says commit ${BASH_REMATCH[2]}, the programs before it $commit"
  fi
  help=$("$program" --help) || fail "$name --help exited $?"
  grep -q -- '--version' <<<"$help" || fail "$name --help does not mention --version"
  echo "$out"
done
echo "version_test: passed ($# programs, version $expected, commit $commit)"
