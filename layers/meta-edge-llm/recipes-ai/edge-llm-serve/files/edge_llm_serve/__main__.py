"""``python3 -m edge_llm_serve``: the same command line as /usr/bin/edge-llm-serve."""

import sys

from edge_llm_serve.startup import main

sys.exit(main())
