"""The docs gallery's reduced PNGs from a ``rfkernels figures`` output folder.

``python -m rfkernels.figures._gallery OUT docs/_static/gallery [NAME ...]``
resizes each ``OUT/NAME.png`` (every figure's, or those named) to 900 pixels wide (figures with several panels) or
640 (one panel) and stores it with an adaptive 128-colour palette (25-45 KB
each).
"""

from __future__ import annotations

import os
import sys

from rfkernels.storage import atomic_write

from . import FIGURES

#: Width in pixels of each gallery image.
WIDTHS = {"ratio": 900, "mse_vs_m": 900, "orthogonality_gain": 900, "bias_audit": 900,
          "attention": 640, "mse_vs_angle": 640, "feature_budget": 640,
          "zoo_attention": 900, "capacity": 900, "attention_regime": 900, "figure4": 900,
          "beyond": 900, "estimator_choice": 900, "gaussian": 900, "real_data": 900,
          "floor": 900, "causal": 900, "qmc": 900, "hybrid": 900}


def make_gallery(out_dir, gallery_dir, names=None):
    """Write the reduced PNG of every figure (or of ``names``) in ``out_dir`` into ``gallery_dir``;
    returns the paths."""
    import io

    from PIL import Image

    paths = []
    for name in FIGURES if names is None else names:
        with Image.open(os.path.join(out_dir, f"{name}.png")) as im:
            im = im.convert("RGB")
            width = WIDTHS[name]
            small = im.resize((width, round(im.height * width / im.width)), Image.LANCZOS)
            buf = io.BytesIO()
            small.quantize(128, method=Image.Quantize.MEDIANCUT).save(buf, format="PNG", optimize=True)
        path = os.path.join(gallery_dir, f"{name}.png")
        data = buf.getvalue()
        atomic_write(path, lambda fh, data=data: fh.buffer.write(data))
        paths.append(path)
    return paths


if __name__ == "__main__":  # pragma: no cover - a maintainer's tool
    for p in make_gallery(sys.argv[1], sys.argv[2], sys.argv[3:] or None):
        print(p, os.path.getsize(p))
