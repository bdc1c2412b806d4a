#!/usr/bin/env bash
# `make test`: every check, with each stage's time.
#   tests/run_all.sh <venv bin dir> <pytest workers> <minimum slider figures>
# One pytest run keeps both cores busy: the unit tests, and every chapter executed as nbval items twice
# (compared with its stored outputs; on new seeds with every claim asserted); then the margin report.
# Beside it, the book is built and then checked in a browser (they were stages after pytest, 71 s;
# the browser mostly waits on page loads and redraws, so beside pytest they add little). Their
# output goes to _build/logs/ and is printed after pytest's, so the log reads in order.
set -uo pipefail
if [ $# -ne 3 ]; then
  echo "usage: tests/run_all.sh <venv bin dir> <pytest workers> <minimum slider figures>" >&2
  exit 2
fi
bin=$1 workers=$2 min_sliders=$3
logs=_build/logs
mkdir -p "$logs"
rm -f "$logs/book.log" "$logs/browser.log"
: > "$logs/stages.txt"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - $1 )); }

(
  t=$(date +%s)
  make --no-print-directory book > "$logs/book.log" 2>&1
  status=$?
  echo "stage book (beside pytest): $(elapsed "$t") s, exit $status" >> "$logs/stages.txt"
  [ $status -eq 0 ] || exit $status
  t=$(date +%s)
  node tests/browser/test_sliders.mjs _build/html "$min_sliders" > "$logs/browser.log" 2>&1
  status=$?
  echo "stage browser (beside pytest): $(elapsed "$t") s, exit $status" >> "$logs/stages.txt"
  exit $status
) &
book_pid=$!

t=$(date +%s)
"$bin/pytest" -n "$workers" --dist loadfile --durations=12
pytest_status=$?
echo "stage pytest (unit + notebooks on stored and new seeds): $(elapsed "$t") s"
echo "--- margins of the asserted claims (tests/margins_report.py)"
"$bin/python" tests/margins_report.py _build/margins
margins_status=$?

wait "$book_pid"
book_status=$?
echo "--- book build (tail; whole log: $logs/book.log)"
tail -n 5 "$logs/book.log"
if [ -s "$logs/browser.log" ]; then
  echo "--- browser test (whole log: $logs/browser.log)"
  cat "$logs/browser.log"
fi
cat "$logs/stages.txt"
echo "stage total: $(elapsed "$start") s"
if [ $pytest_status -ne 0 ] || [ $margins_status -ne 0 ] || [ $book_status -ne 0 ]; then
  echo "make test FAILED: pytest exit $pytest_status, margins exit $margins_status, book + browser exit $book_status"
  exit 1
fi
