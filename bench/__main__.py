"""`python -m bench`: the benchmark runner (bench/run.py)."""

import sys

from bench.run import main

sys.exit(main())
