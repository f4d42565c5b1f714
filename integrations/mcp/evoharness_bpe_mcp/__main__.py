"""``python -m evoharness_bpe_mcp``: the same as ``evoharness mcp``."""

import sys

from .cli import main

sys.exit(main())
