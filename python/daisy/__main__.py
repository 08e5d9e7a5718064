"""``python -m daisy``: the daisy command line (see `daisy.cli`)."""

import sys

from daisy.cli import main

sys.exit(main())
