"""`python -m gitsync` runs the command line."""

import sys

from gitsync.cli import main

sys.exit(main())
