"""`python -m nodeagent`: see `nodeagent.cli`."""

import sys

from nodeagent.cli import main

sys.exit(main())
