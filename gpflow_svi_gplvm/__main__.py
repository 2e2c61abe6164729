"""``python -m gpflow_svi_gplvm``: see :mod:`gpflow_svi_gplvm.cli.main`."""

import sys

from .cli.main import main

sys.exit(main())
