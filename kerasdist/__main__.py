"""Lets ``python -m kerasdist`` run the command line."""

from kerasdist.cli import main

raise SystemExit(main())
