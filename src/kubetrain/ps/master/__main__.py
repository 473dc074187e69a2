"""`python -m kubetrain.ps.master`: see :mod:`kubetrain.ps.master.main`."""

import sys

from kubetrain.ps.master.main import main

sys.exit(main())
