#!/usr/bin/env bash
# valgrind memcheck of the C core: every entry point, good and error paths
# (tests/memcheck/driver.py), with Python objects as plain malloc blocks.
#
#   tests/memcheck/run.sh [PYTHON] [ROUNDS]     # PYTHON: one that imports aiosendfile._core_c
#
# Fails (exit 1) on any invalid read or write, use of uninitialised memory, bad
# free, or a definitely lost block; prints "no definite leak, no invalid access"
# otherwise.  CPython's own blocks still reachable at exit are not errors.
# Not in CI (a few minutes under valgrind); `apt-get install valgrind` first.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${1:-python3}
ROUNDS=${2:-20}
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
"$PY" -c 'import aiosendfile._core_c' || { echo "$PY has no C core" >&2; exit 2; }
LOG=$(mktemp /tmp/aiosendfile-memcheck.XXXXXX)
echo "memcheck: $("$PY" -c 'import aiosendfile._core_c as c; print(c.__file__)'), $ROUNDS rounds; log in $LOG"
status=0
PYTHONMALLOC=malloc valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite \
    --errors-for-leak-kinds=definite --error-exitcode=1 --track-origins=yes \
    --suppressions="$HERE/python.supp" --log-file="$LOG" \
    "$PY" "$HERE/driver.py" "$ROUNDS" || status=$?
grep -E "ERROR SUMMARY|definitely lost|Invalid|uninitialised" "$LOG" | sed 's/^==[0-9]*== //' | sort | uniq -c | sort -rn | head -20
if [ "$status" -ne 0 ]; then
    echo "memcheck: FAILED (exit $status): see $LOG" >&2
    exit 1
fi
echo "memcheck: no definite leak, no invalid access"
