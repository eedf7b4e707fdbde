"""The pretrained-model commands end to end: load, diagnose every head, transplant (no numbers asserted).

Each in a fresh ``rfkernels`` process, best of ``--repeat`` (default 1; the
Numba cache warm), on the packaged all-MiniLM-L6-v2 and the default text:

- ``python -c "from rfkernels import models; models.load()"``: reading the
  weights and the tokenizer from the package's zip;
- ``rfkernels diagnose --model all-MiniLM-L6-v2``: the default grid on the 72
  heads of one 512-token passage;
- ``rfkernels transplant``: one estimator (positive, orthogonal) at four m,
  4 draws, 32 sentences of at most 64 tokens (the issue's limit: 60 s)::

    python benchmarks/bench_models.py --repeat 3
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

CASES = {
    "load": [sys.executable, "-c", "from rfkernels import models; models.load()"],
    "diagnose --model (default grid)": [sys.executable, "-m", "rfkernels", "diagnose", "--model",
                                        "all-MiniLM-L6-v2", "--out", "{out}"],
    "transplant (4 m, 4 draws, 32 sentences)": [sys.executable, "-m", "rfkernels", "transplant",
                                                "--out", "{out}"],
}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    best = {}
    for _ in range(args.repeat):
        for name, argv in CASES.items():
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [a.replace("{out}", f"{tmp}/out") for a in argv]
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True)
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - t0)
    print(f"best of {args.repeat}:")
    for name, seconds in best.items():
        print(f"| {name} | {seconds:.1f} s |")


if __name__ == "__main__":
    main()
