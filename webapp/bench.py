"""`python -m webapp.bench --viewers 50 200`: the web app's load benchmark, which lives in
benchmarks/web_bench.py with the other benchmarks (this name is the command issue 20 gives)."""

import sys

from benchmarks.web_bench import main

if __name__ == "__main__":
    sys.exit(main())
