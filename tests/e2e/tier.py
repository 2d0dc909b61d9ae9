"""Where the tier's long modules run (``tests/e2e/conftest.py`` has the rest of the tier's placement).

The soaks, the rescues, the fault module and the zero-restart rotate pass on a real node run alone, but run there
beside the other modules they took ``make test`` past its 30 minutes, and the machine's load cost other modules'
writers a write (docs/sandbox.md, "The end-to-end tier on a real node"). They run over the node agent unless
``OPSMANAGER_LONG_MODULE_NODES`` says how many real nodes to give them.
"""

from __future__ import annotations

import os
from typing import Final

LONG_MODULE_NODES: Final = int(os.environ.get("OPSMANAGER_LONG_MODULE_NODES", "0"))
