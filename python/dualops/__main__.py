"""``python -m dualops``: the main job (see ``dualops.cli``)."""
import sys

from .cli import main

sys.exit(main())
