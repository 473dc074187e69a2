"""`python -m kubetrain.ps.worker`: see :mod:`kubetrain.ps.worker.main`."""

import sys

from kubetrain.ps.worker.main import main

sys.exit(main())
