"""``python -m lazyburn``: the ``lazyburn`` command."""
import sys

from .cli import main

sys.exit(main())
