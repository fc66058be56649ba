"""``python -m simfl.cli``: the ``simfl`` command."""

import sys

from simfl.cli.entry import main

sys.exit(main())
