"""benchmarks/speed.py records the CPU model it ran on, or nothing (never a guess)."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import speed  # noqa: E402


def test_cpu_model_from_cpuinfo_or_lscpu(monkeypatch):
    model = speed.cpu_model()
    assert model is None or (model.strip() == model and model)

    def no_cpuinfo(path, *args, **kwargs):
        raise OSError("no /proc/cpuinfo")

    monkeypatch.setattr(pathlib.Path, "read_text", no_cpuinfo)
    lscpu = "Architecture: x86_64\nModel name:   Some CPU 9000\nCPU(s): 2\n"
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=lscpu),
    )
    assert speed.cpu_model() == "Some CPU 9000"


def test_cpu_model_is_none_when_nothing_names_it(monkeypatch):
    monkeypatch.setattr(
        pathlib.Path,
        "read_text",
        lambda path, *a, **k: "processor : 0\nBogoMIPS : 50.0\n",
    )

    def no_lscpu(*args, **kwargs):
        raise OSError("no lscpu")

    monkeypatch.setattr(subprocess, "run", no_lscpu)
    assert speed.cpu_model() is None
