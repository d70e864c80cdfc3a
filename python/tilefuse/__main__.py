"""``python -m tilefuse``: the ``tilefuse`` command."""

import sys

from .cli import main

sys.exit(main())
