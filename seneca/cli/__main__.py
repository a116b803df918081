"""``python -m seneca.cli``: the ``seneca`` command."""

import sys

from seneca.cli.main import main

sys.exit(main())
