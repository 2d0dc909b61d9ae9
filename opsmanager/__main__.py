import sys

from opsmanager.cli import main

sys.exit(main())
