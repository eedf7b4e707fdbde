"""Old name of :mod:`rfkernels.storage`, kept only while in-flight work moves over."""

from .storage import *  # noqa: F403
from .storage import atomic_write, current_umask, git_revision, package_versions  # noqa: F401
