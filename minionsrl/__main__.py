"""``python -m minionsrl``: the ``minionsrl`` command."""

import sys

from minionsrl.cli import main

if __name__ == "__main__":
    sys.exit(main())
