"""``python -m meshd`` runs the daemon's command line."""

from meshd.cli import main

main()
