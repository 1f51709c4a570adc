"""``python -m meshctl.cli``: the same command line as the ``meshctl`` script."""

from meshctl.cli import main

main()
