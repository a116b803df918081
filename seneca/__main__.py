"""``python -m seneca``: the ``seneca`` command."""

import sys

from seneca._cli.main import main

sys.exit(main())
