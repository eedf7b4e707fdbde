"""``python -m rfkernels`` runs the command line."""

import sys

from .commands.cli import main

sys.exit(main())
