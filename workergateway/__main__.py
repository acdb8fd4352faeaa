"""`python -m workergateway` (`workergateway.cli`)."""

import sys

from workergateway.cli import main

sys.exit(main())
