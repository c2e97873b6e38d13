"""``python -m linkbench.report SWEEP [SWEEP_B]``: kept as a name; the report is
:mod:`linkbench.analysis.report`."""

import sys

from linkbench.analysis.report import main

if __name__ == "__main__":
    sys.exit(main())
