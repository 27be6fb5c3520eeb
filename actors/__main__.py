"""``python -m actors`` and the ``actors`` console script: see `actors._tools._cli`."""

import sys

from ._tools._cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
