"""`python -m hangar` runs the CLI."""

from hangar.cli import main

main()
