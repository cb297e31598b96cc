"""``python -m dispatcher``: the same as the ``dispatcher`` command."""

from dispatcher.cli import main

raise SystemExit(main())
