"""Shared by the command-line fault tests: the stderr of an argparse refusal."""

import pytest

from rfkernels.commands.cli import main


def usage_error_lines(argv, capsys):
    """The stderr lines of an argparse error (exit status 2, nothing on stdout, no traceback)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    return captured.err.strip().splitlines()
