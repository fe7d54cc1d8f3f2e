"""``python -m reproduce TABLE``: the command line of `reproduce.cli` (see its docstring)."""
import sys

from reproduce.cli import main

sys.exit(main())
