import sys

from bayesspec.cli import main

sys.exit(main())
