"""`python -m kubetrain.ps.server`: see :mod:`kubetrain.ps.server.main`."""

import sys

from kubetrain.ps.server.main import main

sys.exit(main())
