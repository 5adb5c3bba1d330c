"""``python -m aumann``: the ``aumann`` command line (:mod:`aumann.cli`)."""

import sys

from aumann.cli import main

sys.exit(main())
