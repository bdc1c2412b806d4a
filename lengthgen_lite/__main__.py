"""``python -m lengthgen_lite run CONFIG ...``: see :mod:`lengthgen_lite.cli`."""

from .cli import main

raise SystemExit(main())
