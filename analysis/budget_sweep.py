"""Temporary alias of `reproduce.budget_sweep` (the sweep moved there: it trains, and `analysis/`
only measures).  It exists so that a sweep started as ``python -m analysis.budget_sweep`` before the
move keeps working; use ``python -m reproduce.budget_sweep``.  To be removed."""
import sys

from reproduce.budget_sweep import main  # noqa: F401  (re-exported for old callers)

if __name__ == "__main__":
    sys.exit(main())
