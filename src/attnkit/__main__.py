"""``python -m attnkit``: the ``attnkit`` command line."""

import sys

from attnkit.cli.main import main

sys.exit(main())
