"""Subcommands of the ``rfkernels`` command line (the top layer); each module registers its own."""
