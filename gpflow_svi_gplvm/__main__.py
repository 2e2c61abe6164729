"""``python -m gpflow_svi_gplvm``: the command line, :func:`gpflow_svi_gplvm.cli.main.main`, which
reads the options (``--help`` prints at once) before TensorFlow loads."""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
