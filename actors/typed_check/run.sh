#!/bin/bash
# typed_union (actors/typed.hpp) is checked at compile time: the check's file compiles
# as it is, and fails to compile, naming the mismatch, when a part leaves a handler of
# the interface out or a handler's reply is not the interface's.
#   run.sh COMPILER SOURCE INCLUDE_DIR
set -u
cxx=$1 src=$2 inc=$3
try() { "$cxx" -std=c++20 -fsyntax-only -I "$inc" "$@" "$src" 2>&1; }
if ! out=$(try); then echo "FAIL: the check's file does not compile as it is:"; echo "$out" | head -20; exit 1; fi
out=$(try -DLEAVE_ONE_OUT) && { echo "FAIL: a part without one of the interface's handlers compiled"; exit 1; }
grep -q "the parts' handlers are not exactly the actor's interface" <<<"$out" ||
  { echo "FAIL: a missing handler failed for another reason:"; echo "$out" | grep error | head -5; exit 1; }
out=$(try -DWRONG_REPLY) && { echo "FAIL: a handler with the wrong reply compiled"; exit 1; }
grep -q "unexpected handler" <<<"$out" ||
  { echo "FAIL: a wrong reply failed for another reason:"; echo "$out" | grep error | head -5; exit 1; }
echo "ok: typed_union takes the whole interface and refuses a missing handler and a wrong reply"
