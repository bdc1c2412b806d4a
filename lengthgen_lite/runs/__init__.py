"""The floor between the core and the chapters: experiment specs, the one runner, the
one results table, and the scorecard's vocabulary. Chapters declare their experiments
here as data (``SPECS: dict[str, Spec]``) and read their science from a ``Results``; the
command line runs any of them by name. Imports only :mod:`lengthgen_lite.core`.
"""

from .results import Results
from .runner import run
from .spec import Config, Spec

__all__ = ["Config", "Results", "Spec", "run"]
