"""What compiling a training's step costs a fresh process, the way a reader pays it:
a notebook's new kernel with an empty inductor cache (cold, the first execution) and
with the cache a first run filled (warm, every re-execution). Shared by
``fast_path.py`` (each chapter's main training, the two-layer step) and
``retrieval.py`` (chapter 4's retrieval step).

Measured in-process after other graphs, the figure hides what a new kernel pays once
(dynamo's and inductor's imports and set-up, the first trace): issue 36 measured 6.1 s
cold and 1.0 s warm in-process against 17-18 s and about 4 s in a fresh kernel.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

BENCHMARKS = pathlib.Path(__file__).resolve().parent

# ``setup`` defines ``args`` and ``kwargs`` of ``train`` (a compiled training); the
# cost is the first call's wall seconds less the second's, which reuses the graph
TEMPLATE = """
import json, sys, time
sys.path.insert(0, {benchmarks!r})
from lengthgen_lite.core.training import train
{setup}
seconds = []
for _ in range(2):
    start = time.perf_counter()
    train(*args, **kwargs, progress=False)
    seconds.append(time.perf_counter() - start)
print(json.dumps(seconds[0] - seconds[1]))
"""


def compile_cost(setup: str) -> dict[str, float]:
    """Wall seconds of compiling the step of the training ``setup`` defines (Python
    code setting ``args`` and ``kwargs`` of ``train``; the benchmarks folder is
    importable) in a fresh process: cold (an empty inductor cache), then warm (another
    fresh process, the cache the cold one filled)."""
    code = TEMPLATE.format(benchmarks=str(BENCHMARKS), setup=setup.strip())
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        for name in ("cold", "warm"):
            run = subprocess.run(
                [sys.executable, "-c", code],
                env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache},
                capture_output=True,
                text=True,
                check=True,
            )
            out[f"compile_{name}_s"] = round(json.loads(run.stdout), 1)
    return out
