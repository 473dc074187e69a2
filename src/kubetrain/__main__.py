"""`python -m kubetrain`."""

import sys

from kubetrain.cli import main

sys.exit(main())
