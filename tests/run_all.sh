#!/usr/bin/env bash
# `make test`: every check, with each stage's time.
#   tests/run_all.sh <venv bin dir> <pytest workers> <minimum slider figures>
# One pytest run keeps both cores busy: the unit tests and every chapter re-executed and compared.
# The book is built beside it (its output goes to _build/logs/book.log and its tail is printed after
# pytest's, so the log reads in order). The browser test then checks the built book, alone.
set -uo pipefail
if [ $# -ne 3 ]; then
  echo "usage: tests/run_all.sh <venv bin dir> <pytest workers> <minimum slider figures>" >&2
  exit 2
fi
bin=$1 workers=$2 min_sliders=$3
logs=_build/logs
mkdir -p "$logs"
rm -f "$logs/book.stage"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - $1 )); }

(
  t=$(date +%s)
  make --no-print-directory book > "$logs/book.log" 2>&1
  status=$?
  echo "stage book (beside pytest): $(elapsed "$t") s, exit $status" > "$logs/book.stage"
  exit $status
) &
book_pid=$!

t=$(date +%s)
"$bin/pytest" -n "$workers" --dist loadgroup --durations=12 tests
pytest_status=$?
echo "stage pytest (unit + notebooks): $(elapsed "$t") s"

wait "$book_pid"
book_status=$?
echo "--- book build (tail; whole log: $logs/book.log)"
tail -n 5 "$logs/book.log"
cat "$logs/book.stage"

browser_status=1
if [ $book_status -eq 0 ]; then
  t=$(date +%s)
  node tests/browser/test_sliders.mjs _build/html "$min_sliders"
  browser_status=$?
  echo "stage browser: $(elapsed "$t") s"
fi
echo "stage total: $(elapsed "$start") s"
if [ $pytest_status -ne 0 ] || [ $book_status -ne 0 ] || [ $browser_status -ne 0 ]; then
  echo "make test FAILED: pytest exit $pytest_status, book exit $book_status, browser exit $browser_status"
  exit 1
fi
