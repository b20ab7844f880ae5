"""Run the toolid command line: ``python -m toolid``."""

from toolid.cli import main

raise SystemExit(main())
