"""`python -m reproduce.jobs SUBCOMMAND`: reproduce/jobs/cli.py."""
import sys

from reproduce.jobs.cli import main

sys.exit(main())
