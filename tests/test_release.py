"""A book readers can get without building it: `make dist`, the two workflows that
publish it (.github/workflows/), and what a downloaded chapter says about running it.

The workflows may only run what the README tells a reader to run, installing through
make from the pinned files; a release's tag, the version in pyproject.toml, CITATION.cff
and the CHANGELOG name one version. The Makefile is read with `make -n` (prints the
commands, runs none).
"""

import fnmatch
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest
import yaml
from setuptools import build_meta

from lengthgen_lite.runs.store import STORE

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import lengthgen_book as ext  # noqa: E402


def version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]["version"]


def readme_commands() -> set[str]:
    """The commands of the README's "Two commands" block, without their comments."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"^## Two commands\n\n```bash\n(.*?)^```", readme, re.M | re.S)
    assert block, "README.md has no ```bash block under '## Two commands'"
    return {
        re.sub(r"\s+", " ", line.split("#")[0]).strip()
        for line in block.group(1).splitlines()
        if line.split("#")[0].strip()
    }


def workflow(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def steps(flow: dict) -> list[dict]:
    return [step for job in flow["jobs"].values() for step in job.get("steps", [])]


def make_commands(flow: dict) -> list[str]:
    runs = "\n".join(step.get("run", "") for step in steps(flow))
    return re.findall(r"\bmake\b(?: [\w-]+)?", runs)


MAKE = shutil.which("make")


def dry_run(*args: str, env: dict[str, str] | None = None, venv: bool = False) -> str:
    """What make would run, on one line per command (`make -n`: nothing is executed;
    ENV= leaves the venv out unless `venv`)."""
    result = subprocess.run(
        [MAKE, "-n", "--no-print-directory", *([] if venv else ["ENV="]), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return re.sub(r"[ \t]+", " ", re.sub(r"\\\n[ \t]*", " ", result.stdout))


def make_variable(name: str, env: dict[str, str] | None = None) -> str:
    database = dry_run("-p", "lint", env=env)
    match = re.search(rf"^{name} :?= (.*)$", database, re.M)
    assert match, f"the Makefile sets no {name}"
    return match.group(1).strip()


def test_the_workflows_run_the_readmes_commands():
    commands = readme_commands()
    assert {"make book", "make pdf", "make dist"} <= commands
    for name in ("pages.yml", "release.yml"):
        used = make_commands(workflow(name))
        assert used, f"{name} runs no make command"
        assert set(used) <= commands, (
            f"{name} runs {sorted(set(used) - commands)}, which the README's "
            f"'Two commands' block does not show"
        )
    assert make_commands(workflow("pages.yml")) == ["make book", "make pdf"]
    assert make_commands(workflow("release.yml")) == ["make dist"]


def test_pages_uploads_the_html_book_and_deploys_it():
    uses = {
        step.get("uses", "").split("@")[0]: step
        for step in steps(workflow("pages.yml"))
    }
    assert uses["actions/upload-pages-artifact"]["with"]["path"] == "_build/html"
    assert "actions/deploy-pages" in uses


def test_the_workflows_install_only_through_make_from_the_pinned_files():
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for step in steps(workflow(path.name)):
            run = step.get("run", "")
            assert not re.search(r"\b(pip|pip3|npm|apt-get|conda)\b", run), (
                f"{path.name} installs outside make: {run!r}"
            )
            if "uses" in step:
                assert re.fullmatch(r"[\w-]+/[\w-]+@v\d+", step["uses"]), (
                    f"{path.name}: {step['uses']} is not pinned by major version (@vN)"
                )
    venv = dry_run("-B", ".venv/.installed", venv=True)
    assert re.search(
        r"pip install --quiet -r requirements\.txt -c constraints\.txt -e \.", venv
    )
    assert "npm ci" in dry_run("-B", "node_modules/.installed")


def test_the_torch_index_is_opt_in():
    install = re.compile(r"^.*pip install --quiet -r requirements\.txt.*$", re.M)
    default = install.search(dry_run("-B", ".venv/.installed", venv=True)).group(0)
    pinned = ".venv/bin/pip install --quiet -r requirements.txt -c constraints.txt -e ."
    assert default.split() == pinned.split(" ")
    index = "https://download.pytorch.org/whl/cpu"
    chosen = install.search(
        dry_run(
            "-B", ".venv/.installed", env={"LENGTHGEN_TORCH_INDEX": index}, venv=True
        )
    ).group(0)
    assert chosen.split()[-2:] == ["--extra-index-url", index]
    for name in ("pages.yml", "release.yml"):
        for job in workflow(name)["jobs"].values():
            if job.get("steps") and any(
                "make" in s.get("run", "") for s in job["steps"]
            ):
                assert job["env"]["LENGTHGEN_TORCH_INDEX"] == index, name


def test_one_version_for_a_release():
    v = version()
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["version"] == v
    changelog = (ROOT / "CHANGELOG.md").read_text()
    released = re.search(r"^## (?!Unreleased$)(\S+)", changelog, re.M)
    assert released and released.group(1) == v, (
        "CHANGELOG's newest entry is this version"
    )
    assert make_variable("VERSION") == v


def test_the_release_workflow_runs_on_the_versions_tag():
    flow = workflow("release.yml")
    trigger = flow.get("on", flow.get(True))  # YAML 1.1 reads a bare `on` as True
    patterns = trigger["push"]["tags"]
    assert any(fnmatch.fnmatchcase(f"v{version()}", p) for p in patterns)
    assert not any(fnmatch.fnmatchcase(version(), p) for p in patterns), (
        "a tag without the v would release too"
    )
    check = "\n".join(step.get("run", "") for step in steps(flow))
    assert '"$GITHUB_REF_NAME" != "v$version"' in check
    assert "_build/dist/*" in check


def test_make_dist_builds_the_archive_the_pdf_the_wheel_and_the_sdist():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^\.PHONY:.*\bdist\b", makefile, re.M)
    assert re.search(r"^dist:", makefile, re.M)
    v = version()
    dist = dry_run("dist")
    for expected in (
        f"tar -czf _build/dist/lengthgen-lite-{v}-html.tar.gz",
        "cp _build/pdf/lengthgen-lite.pdf _build/dist/",
        "build_meta.build_sdist",
        f"--wheel-dir _build/dist _build/dist/lengthgen_lite-{v}.tar.gz",
    ):
        assert expected in dist, f"make dist does not run {expected!r}"
    # the book and the PDF are built first, and the PDF sits inside the HTML book
    assert dist.index("jupyter-book build . --all") < dist.index("print_pdf.mjs")
    assert dist.index("print_pdf.mjs") < dist.index("tar -czf")
    assert make_variable("BOOK_PDF") == f"_build/html/{ext.BOOK_PDF}"
    assert f"cp _build/pdf/lengthgen-lite.pdf _build/html/{ext.BOOK_PDF}" in dist


def test_the_book_links_to_its_pdf():
    intro = (ROOT / "book" / "intro.md").read_text()
    # book/intro.html is one folder down from the PDF at the root of the HTML book
    assert f'<a href="../{ext.BOOK_PDF}">' in intro


def test_the_repository_is_named_once_for_the_book_and_the_chapters():
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url)
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        first_code = next(i for i, c in enumerate(cells) if c["cell_type"] == "code")
        above = "".join(cells[first_code - 1]["source"])
        assert cells[first_code - 1]["cell_type"] == "markdown", path.name
        for words in (
            f"<{url}>",
            "`make lab`",
            "lengthgen_lite-<version>-py3-none-any.whl",
        ):
            assert words in above, (
                f"{path.name}: the cell above the setup cell does not say {words!r}"
            )


def test_chromium_is_chosen_in_one_place(tmp_path):
    browser = (ROOT / "tools" / "browser.mjs").read_text()
    assert "process.env.LENGTHGEN_CHROMIUM" in browser
    assert "/usr/bin/chromium" not in browser
    assert re.search(
        r"^export LENGTHGEN_CHROMIUM := \$\(CHROMIUM\)$",
        (ROOT / "Makefile").read_text(),
        re.M,
    )
    assert make_variable("CHROMIUM", env={"LENGTHGEN_CHROMIUM": "/opt/c/chrome"}) == (
        "/opt/c/chrome"
    )
    # found on PATH: a google-chrome where no chromium is
    for tool in ("bash", "sed"):
        (tmp_path / tool).symlink_to(
            subprocess.check_output(["which", tool], text=True).strip()
        )
    chrome = tmp_path / "google-chrome"
    chrome.write_text("#!/bin/sh\n")
    chrome.chmod(0o755)
    env = {"PATH": str(tmp_path), "LENGTHGEN_CHROMIUM": ""}
    assert make_variable("CHROMIUM", env=env) == str(chrome)
    # a named browser that is missing stops make, before any apt-get
    missing = tmp_path / "no-such-chrome"
    result = subprocess.run(
        [MAKE, "--no-print-directory", str(missing)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "LENGTHGEN_CHROMIUM": str(missing)},
    )
    assert result.returncode != 0
    assert f"LENGTHGEN_CHROMIUM={missing}: no such file" in result.stderr
    assert "apt-get" not in result.stdout


def test_make_test_checks_the_release_files_as_a_reader_gets_them():
    run_all = (ROOT / "tests" / "run_all.sh").read_text()
    assert "make --no-print-directory check-dist" in run_all
    v = version()
    check = dry_run("check-dist", "MIN_SLIDERS=7")
    unpacked = f"_build/unpacked/lengthgen-lite-{v}-html"
    for expected in (
        f"tar -xzf _build/dist/lengthgen-lite-{v}-html.tar.gz -C _build/unpacked",
        f"node tests/browser/test_sliders.mjs {unpacked} 7",
        f"node tests/browser/test_offline.mjs {unpacked}",
        f"tests/check_wheel.py _build/dist/lengthgen_lite-{v}-py3-none-any.whl",
    ):
        assert expected in check, f"make check-dist does not run {expected!r}"
    # the archive is made before it is unpacked, and checked before the wheel
    assert check.index("tar -czf") < check.index("tar -xzf")


def test_the_wheel_carries_the_reference_store(tmp_path):
    stored = {p.relative_to(STORE.parents[1]) for p in STORE.glob("*/*.json.gz")}
    assert stored, "the reference store is empty"
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        sdist = build_meta.build_sdist(str(tmp_path))
    finally:
        os.chdir(cwd)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
        + ["--no-build-isolation", "--no-index", "--wheel-dir", str(tmp_path)]
        + [str(tmp_path / sdist)],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = {str(p) for p in stored} - {
        n.removeprefix("lengthgen_lite/") for n in names
    }
    assert not missing, f"the wheel lacks {len(missing)} stored sweep files"


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def test_every_release_tag_names_its_commits_version():
    """A tag v<version> sits on a commit whose pyproject.toml, CITATION.cff and newest
    CHANGELOG heading give that version (a release tags the commit that bumps it)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist)")
    tags = git("tag", "--list", "v*").split()
    for tag in tags:
        at = tag + ":"
        project = tomllib.loads(git("show", at + "pyproject.toml"))["project"]
        assert f"v{project['version']}" == tag, f"{tag} tags version {project}"
        cff = yaml.safe_load(git("show", at + "CITATION.cff"))
        assert f"v{cff['version']}" == tag
        changelog = git("show", at + "CHANGELOG.md")
        newest = re.search(r"^## (\d[\w.]*)", changelog, re.M)
        assert newest and f"v{newest.group(1)}" == tag, f"{tag}: changelog's newest"
