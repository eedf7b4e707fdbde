"""Old name of :mod:`rfkernels.validation`, kept only while in-flight work moves over."""

from .validation import *  # noqa: F403
from .validation import _complex_error, _is_complex_scalar  # noqa: F401
