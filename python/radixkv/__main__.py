"""``python -m radixkv`` (and the ``radixkv`` console script)."""

from __future__ import annotations

import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    # The core needs only numpy; the demo needs torch and rich. Say so in one line, not a traceback.
    try:
        import rich  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print(f"radixkv: the demo needs torch and rich ({e.name} is missing): "
              "pip install 'radixkv[demo]' (or: pip install torch rich)", file=sys.stderr)
        return 2
    from radixkv.engine.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
