"""Option parsing shared by subcommands: comma lists and scientific integers."""

from __future__ import annotations

import argparse
import math


def int_value(text):
    """An integer that may be written 1e6."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not math.isfinite(value) or not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(value)


def _list_of(convert):
    def parse(text):
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("expected a comma-separated list")
        return [convert(t) for t in items]

    return parse


def _float(text):
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


int_list = _list_of(int_value)
float_list = _list_of(_float)
str_list = _list_of(str)
