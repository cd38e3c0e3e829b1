"""``python -m devicehost.cli``: the ``devicehost`` command."""

import sys

from devicehost.cli.main import main

sys.exit(main())
