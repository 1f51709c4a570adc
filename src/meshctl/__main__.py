"""``python -m meshctl`` runs the command line, as ``python -m meshd`` runs the daemon's
(for a venv whose scripts folder is not on PATH)."""

from meshctl.cli import main

main()
