"""``python -m radixkv`` (and the ``radixkv`` console script)."""

from __future__ import annotations

import sys

from radixkv.engine.cli import main

if __name__ == "__main__":
    sys.exit(main())
