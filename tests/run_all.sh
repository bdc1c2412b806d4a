#!/usr/bin/env bash
# `make test`: every check, with each stage's time. First the formatter and the linter (make lint:
# ruff format --check, ruff check; a second or two); a finding fails make test at the end, after
# every other stage has run, so a stray long line does not hide a test result.
#   tests/run_all.sh <venv bin dir> <pytest workers> <minimum slider figures> <pdf path>
# One pytest run keeps both cores busy: the unit tests, and every chapter executed as nbval items twice
# (compared with its stored outputs; on new seeds with every claim asserted); then the margin report.
# Beside it, two chains that mostly wait on a browser: (1) the book is built, printed to PDF (make pdf)
# and the PDF checked against it, then the release files made (make check-dist): every page of the
# unpacked HTML archive checked in a browser (axe-core too) and from file://, and the wheel installed
# alone executes the reference page; (2) the live path: chapter 2
# run in JupyterLab and its sliders moved (tests/browser/test_live.mjs). Their output goes to
# _build/logs/ and is printed after pytest's, so the log reads in order.
set -uo pipefail
if [ $# -ne 4 ]; then
  echo "usage: tests/run_all.sh <venv bin dir> <pytest workers> <minimum slider figures> <pdf path>" >&2
  exit 2
fi
bin=$1 workers=$2 min_sliders=$3 pdf=$4
logs=_build/logs
mkdir -p "$logs"
rm -f "$logs/book.log" "$logs/pdf.log" "$logs/browser.log" "$logs/live.log"
: > "$logs/stages.txt"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - $1 )); }
# CPU seconds (user + system) of this shell's children that have finished so far: with the wall
# seconds, what each stage takes from the two cores (the side stages share them with pytest).
# `times` runs in this shell (not in a pipe or $(...), whose subshell has no finished children).
cpu=0
child_cpu() {
  local file="$logs/times.$BASHPID"
  times > "$file"
  cpu=$(awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); printf "%.0f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$file")
  rm -f "$file"
}

echo "--- make lint (ruff format --check, ruff check)"
t=$(date +%s)
"$bin/ruff" format --check .
format_status=$?
"$bin/ruff" check .
check_status=$?
lint_status=$(( format_status || check_status ))
echo "stage lint: $(elapsed "$t") s, exit $lint_status" >> "$logs/stages.txt"

(
  t=$(date +%s); child_cpu; c=$cpu
  make --no-print-directory book > "$logs/book.log" 2>&1
  status=$?
  child_cpu
  echo "stage book (beside pytest): $(elapsed "$t") s, $(( cpu - c )) CPU s, exit $status" >> "$logs/stages.txt"
  [ $status -eq 0 ] || exit $status
  t=$(date +%s); child_cpu; c=$cpu
  { make --no-print-directory pdf && "$bin/python" tests/check_pdf.py "$pdf" _build/html; } > "$logs/pdf.log" 2>&1
  status=$?
  child_cpu
  echo "stage pdf + its check (beside pytest): $(elapsed "$t") s, $(( cpu - c )) CPU s, exit $status" >> "$logs/stages.txt"
  [ $status -eq 0 ] || exit $status
  t=$(date +%s); child_cpu; c=$cpu
  make --no-print-directory check-dist MIN_SLIDERS="$min_sliders" > "$logs/browser.log" 2>&1
  status=$?
  child_cpu
  echo "stage release files: browser + axe and file:// on the unpacked archive, a chapter from the wheel (beside pytest): $(elapsed "$t") s, $(( cpu - c )) CPU s, exit $status" >> "$logs/stages.txt"
  exit $status
) &
book_pid=$!

(
  t=$(date +%s); child_cpu; c=$cpu
  node tests/browser/test_live.mjs "$bin" notebooks/02_attention_dispersion.ipynb _build/live > "$logs/live.log" 2>&1
  status=$?
  child_cpu
  echo "stage live JupyterLab, chapter 2 (beside pytest): $(elapsed "$t") s, $(( cpu - c )) CPU s, exit $status" >> "$logs/stages.txt"
  exit $status
) &
live_pid=$!

t=$(date +%s)
# pytest's own CPU seconds (its workers and kernels included), counted by a parent of its own:
# this shell's count would also take in the side stages that finish meanwhile
"$bin/python" - "$logs/pytest_cpu" "$bin/pytest" -n "$workers" --dist loadfile --durations=12 <<'EOF'
import resource, subprocess, sys
status = subprocess.call(sys.argv[2:])
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{usage.ru_utime + usage.ru_stime:.0f}\n")
sys.exit(status)
EOF
pytest_status=$?
echo "stage pytest (unit + notebooks on stored and new seeds): $(elapsed "$t") s, $(cat "$logs/pytest_cpu") CPU s"
echo "--- margins of the asserted claims (tests/margins_report.py)"
"$bin/python" tests/margins_report.py _build/margins
margins_status=$?

wait "$book_pid"
book_status=$?
wait "$live_pid"
live_status=$?
echo "--- book build (tail; whole log: $logs/book.log)"
tail -n 5 "$logs/book.log"
if [ -s "$logs/pdf.log" ]; then
  echo "--- make pdf and its check (tail; whole log: $logs/pdf.log)"
  tail -n 4 "$logs/pdf.log"
fi
echo "--- live JupyterLab test (whole log: $logs/live.log)"
grep -v '^\s' "$logs/live.log" | tail -n 30
if [ -s "$logs/browser.log" ]; then
  echo "--- browser test (whole log: $logs/browser.log)"
  cat "$logs/browser.log"
fi
cat "$logs/stages.txt"
child_cpu
echo "stage total: $(elapsed "$start") s, $cpu CPU s (2 cores: at most twice the wall seconds)"
if [ $lint_status -ne 0 ] || [ $pytest_status -ne 0 ] || [ $margins_status -ne 0 ] || [ $book_status -ne 0 ] || [ $live_status -ne 0 ]; then
  echo "make test FAILED: lint exit $lint_status (make format fixes most), pytest exit $pytest_status, margins exit $margins_status, book + pdf + browser exit $book_status, live exit $live_status"
  exit 1
fi
