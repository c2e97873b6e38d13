"""``python -m linkbench.project JOB``: kept as a name; the projection is
:mod:`linkbench.analysis.projection`."""

import sys

from linkbench.analysis.projection import main

if __name__ == "__main__":
    sys.exit(main())
