import sys

from aumann.cli import main

sys.exit(main())
