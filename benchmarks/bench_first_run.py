"""A new user's first minutes: cold ``rfkernels`` commands, an empty Numba cache each time (no numbers asserted).

Times, best of ``--repeat`` (3) runs, each in a fresh subprocess with an
empty ``NUMBA_CACHE_DIR`` (what a fresh machine compiles):

- ``rfkernels mse --d 16 --m 8 --angle 2 --kind positive --ensemble
  orthogonal --trials 1e5`` with the default ``--proposal auto`` (the pilot
  and the tilted run it chooses), with ``--proposal plain``, and with
  ``--backend numba`` (the compile the default ``--backend auto`` avoids at
  this size: a larger run still compiles);
- the same commands warm (the cache they filled), for the import floor.

With ``--baseline REV`` the same commands run, interleaved run by run, on a
copy of commit REV (``git archive``, staged with the installed layout:
``analysis/``, ``figures/`` and ``commands/`` inside the package), so the
ratios compare two commits on the same machine state. Prints a Markdown
table for docs/performance.md::

    python benchmarks/bench_first_run.py                       # this checkout
    python benchmarks/bench_first_run.py --baseline 82f3637    # against a commit
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MSE = ["mse", "--d", "16", "--m", "8", "--angle", "2", "--kind", "positive", "--ensemble", "orthogonal",
       "--trials", "1e5", "--no-progress"]
CASES = {"mse (auto)": MSE, "mse --proposal plain": MSE + ["--proposal", "plain"],
         "mse --backend numba": MSE + ["--backend", "numba"]}

#: Runs ``rfkernels`` from a staged copy (argv[1]), the editable install's finder removed.
_STAGED = (
    "import sys; sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; "
    "sys.path.insert(0, sys.argv[1]); import rfkernels; "
    "assert rfkernels.__file__.startswith(sys.argv[1]), rfkernels.__file__; "
    "import importlib; cli = importlib.import_module(sys.argv[2]); sys.exit(cli.main(sys.argv[3:]))"
)


def stage(rev, dest):
    """Commit ``rev`` as an importable tree under ``dest``; returns (path, CLI module name)."""
    archive = dest / "src.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), rev], check=True)
    tree = dest / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    pkg = dest / "src" / "rfkernels"
    shutil.copytree(tree / "rfkernels", pkg)
    for sub in ("analysis", "figures", "commands"):
        if (tree / sub).is_dir():
            shutil.copytree(tree / sub, pkg / sub)
    cli = "rfkernels.commands.cli" if (pkg / "commands" / "cli.py").exists() else "rfkernels.cli"
    return dest / "src", cli


def run(argv, cache, tree=None, cli=None):
    """Wall seconds of one ``rfkernels argv`` with ``NUMBA_CACHE_DIR=cache``."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    if tree is None:
        cmd = [sys.executable, "-m", "rfkernels", *argv]
    else:
        cmd = [sys.executable, "-c", _STAGED, str(tree), cli, *argv]
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=tempfile.gettempdir())
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"rfkernels {' '.join(argv)} failed: {proc.stderr.strip()[-800:]}")
    return seconds


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--baseline", help="a commit to time beside this checkout")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        targets = {"this checkout": (None, None)}
        if args.baseline:
            base = tmp / "baseline"
            base.mkdir()
            targets[args.baseline] = stage(args.baseline, base)
        cold = {(t, c): float("inf") for t in targets for c in CASES}
        warm = dict(cold)
        for r in range(args.repeat):
            for case, cmd in CASES.items():
                for target, (tree, cli) in targets.items():
                    cache = tmp / f"cache-{r}-{abs(hash((case, target)))}"
                    cold[target, case] = min(cold[target, case], run(cmd, cache, tree, cli))
                    warm[target, case] = min(warm[target, case], run(cmd, cache, tree, cli))
                    shutil.rmtree(cache, ignore_errors=True)
    print(f"\nBest of {args.repeat}, each cold run with an empty NUMBA_CACHE_DIR "
          f"({os.cpu_count()} CPUs, Python {sys.version.split()[0]}):\n")
    names = list(targets)
    head = "| command | " + " | ".join(f"{n} cold | {n} warm" for n in names)
    if len(names) == 2:
        head += " | cold ratio |"
    print(head if head.endswith("|") else head + " |")
    print("|" + "---|" * (1 + 2 * len(names) + (len(names) == 2)))
    for case in CASES:
        row = f"| `rfkernels {case}` | " + " | ".join(
            f"{cold[n, case]:.1f} s | {warm[n, case]:.1f} s" for n in names)
        if len(names) == 2:
            row += f" | {cold[names[0], case] / cold[names[1], case]:.2f} |"
        print(row if row.endswith("|") else row + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
