"""``python -m linkbench.nccl_log FILE...``: kept as a name; the parser is
:mod:`linkbench.link.nccl_log`."""

import sys

from linkbench.link.nccl_log import main

if __name__ == "__main__":
    sys.exit(main())
