#!/usr/bin/env python3
"""The documentation's charts, as small SVG files drawn from measured tables:

  docs/img/sma_vs_sgd.svg   epochs to 89% test accuracy, LeNet-5 / Fashion-MNIST, batch 16 per
                            learner, median of 3 seeds, 20-epoch budget: each --sma-rule and
                            large-batch SGD with warm-up at K = 16 and 64 (docs/sma.md, "Central
                            rules for many learners"; tools/bench/sma_scale.py)
  docs/img/speed.svg        training images/s against PyTorch, batch 16, 2 threads
                            (docs/performance.md, "Speed on real models"; tools/bench/real_models.py)

    python3 tools/docs_charts.py [OUT_DIR=docs/img]

The numbers are the tables' (rerun the benchmarks, update them here and in the pages, and run this
again). Python 3 standard library only.
"""

import os
import sys

# Epochs to 89%, median of seeds 0 1 2 (None: not within 20 epochs): (z, + the weight average).
SMA = {
    16: [("paper", 12.48, 10.98), ("elastic", 11.48, 9.48), ("slowmo", 15.48, 10.48),
         ("post-local", 7.99, 6.49), ("S-SGD, batch 256", 8.00, 6.50)],
    64: [("paper", None, None), ("elastic", None, None), ("slowmo", None, None),
         ("post-local", 17.82, 13.36), ("S-SGD, batch 1,024", 14.00, 12.50)],
}
# Images/s, batch 16 (medians of 3 for ResNet-50/18, one run for the others): PyTorch f32 (its
# faster layout), PyTorch autocast bf16, crossbow f32, crossbow bf16 (None: fails).
SPEED = [
    ("ResNet-50", 9.8, 17.1, 9.1, 16.8),
    ("ResNet-18", 28.6, 50.3, 25.8, 45.7),
    ("MobileNetV2", 49.4, None, 57.0, 60.9),
    ("ResNet-20", 781, 883, 1028, 1429),
]

FONT = 'font-family="DejaVu Sans, Arial, sans-serif" font-size="12"'
COLOURS = ["#9aa5b1", "#c2a878", "#8fb996", "#2f6fb0", "#d1495b"]


def svg(width, height, body):
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" {FONT}>\n'
        f'<rect width="{width}" height="{height}" fill="white"/>\n{body}</svg>\n'
    )


def text(x, y, s, anchor="start", extra=""):
    s = s.replace("&", "&amp;").replace("<", "&lt;")
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" {extra}>{s}</text>\n'


def sma_chart():
    """Horizontal bars per K: each rule's epochs (z solid, + EMA lighter), 'never' past 20."""
    left, right, bar, gap, top = 150, 40, 9, 10, 40
    scale = 24.0  # epochs on the axis
    width = 700
    rows = sum(len(v) for v in SMA.values())
    height = top + rows * (2 * bar + gap) + len(SMA) * 30 + 50
    px = lambda e: left + (width - left - right) * e / scale
    b = text(10, 20, "Epochs to 89% test accuracy: LeNet-5, Fashion-MNIST, batch 16 per learner",
             extra='font-weight="bold"')
    y = top
    for k, rows_k in SMA.items():
        b += text(10, y + 12, f"K = {k} learners", extra='font-weight="bold"')
        y += 22
        for i, (name, z, ema) in enumerate(rows_k):
            c = COLOURS[-1] if name.startswith("S-SGD") else COLOURS[3 if name == "post-local" else i % 3]
            b += text(left - 8, y + bar + 4, name, "end")
            for j, (v, alpha) in enumerate(((z, 1.0), (ema, 0.5))):
                yy = y + j * bar
                if v is None:
                    b += (f'<rect x="{left}" y="{yy}" width="{px(20) - left:.1f}" height="{bar - 1}" '
                          f'fill="none" stroke="{c}" stroke-dasharray="3,2"/>\n')
                    if j == 0:
                        b += text(px(20) + 4, yy + bar, "not in 20 epochs", extra='fill="#555"')
                else:
                    b += (f'<rect x="{left}" y="{yy}" width="{px(v) - left:.1f}" height="{bar - 1}" '
                          f'fill="{c}" fill-opacity="{alpha}"/>\n')
                    b += text(px(v) + 4, yy + bar - 1, f"{v:.2f}", extra='font-size="10"')
            y += 2 * bar + gap
        y += 8
    # axis
    for e in range(0, 21, 4):
        b += f'<line x1="{px(e):.1f}" y1="{top}" x2="{px(e):.1f}" y2="{y}" stroke="#ddd"/>\n'
        b += text(px(e), y + 14, str(e), "middle")
    b += text(10, y + 32, "median of 3 seeds; solid: the central model z; light: + the weight "
              "average (what cb-train evaluates)", extra='fill="#555"')
    return svg(width, y + 44, b)


def speed_chart():
    """Bars of each side's images/s relative to PyTorch f32 = 1, per model."""
    left, top, group, bar = 60, 50, 150, 26
    sides = ["PyTorch f32", "PyTorch autocast bf16", "crossbow f32", "crossbow bf16"]
    colours = [COLOURS[0], COLOURS[1], COLOURS[2], COLOURS[3]]
    height_px, top_ratio = 220, 2.0
    width = max(left + group * len(SPEED) + 20, 10 + 170 * len(sides))
    py = lambda r: top + height_px * (1 - r / top_ratio)
    b = text(10, 20, "Training speed against PyTorch f32 (= 1.0): batch 16, 2 threads",
             extra='font-weight="bold"')
    for r in (0.5, 1.0, 1.5, 2.0):
        b += f'<line x1="{left}" y1="{py(r):.1f}" x2="{width - 10}" y2="{py(r):.1f}" stroke="#ddd"/>\n'
        b += text(left - 6, py(r) + 4, f"{r:.1f}x", "end")
    for g, (model, *vals) in enumerate(SPEED):
        x0 = left + g * group + 12
        for i, v in enumerate(vals):
            x = x0 + i * (bar + 3)
            if v is None:
                b += text(x + bar / 2, py(0) - 4, "fails", "middle", 'font-size="9" fill="#555"')
                continue
            r = v / vals[0]
            b += (f'<rect x="{x}" y="{py(r):.1f}" width="{bar}" height="{py(0) - py(r):.1f}" '
                  f'fill="{colours[i]}"/>\n')
            b += text(x + bar / 2, py(r) - 3, f"{r:.2f}", "middle", 'font-size="9"')
        b += text(x0 + 2 * (bar + 3) - 2, py(0) + 16, model, "middle")
    for i, s in enumerate(sides):
        x = 10 + i * 170
        b += f'<rect x="{x}" y="{py(0) + 30}" width="12" height="12" fill="{colours[i]}"/>\n'
        b += text(x + 16, py(0) + 40, s)
    return svg(width, int(py(0) + 56), b)


def main(argv):
    out = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "img")
    os.makedirs(out, exist_ok=True)
    for name, draw in (("sma_vs_sgd.svg", sma_chart), ("speed.svg", speed_chart)):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write(draw())
        print(os.path.join(out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
