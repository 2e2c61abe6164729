"""``python -m gpflow_svi_gplvm``: see :mod:`gpflow_svi_gplvm.cli`."""

import sys

from .cli import main

sys.exit(main())
