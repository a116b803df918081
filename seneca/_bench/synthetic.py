"""Synthetic photo-like image datasets in ImageFolder layout (``seneca make-dataset``).

Each image is a smooth colour gradient with a few soft shapes, multi-scale texture and sensor-like
grain, so JPEG sizes and decode costs resemble photographs (about 110 KB at 500x375, quality 90,
like ImageNet) rather than flat colour or pure noise. The class shows in the hue and the kind of
shapes, so a small model can learn it. Image ``i`` depends only on (seed, i).
"""

from __future__ import annotations

import io
import re
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from seneca import defaults
from seneca_base.errors import ConfigError, DatasetError

__all__ = ["make_dataset", "render_image"]

_GRAIN = 26.0  # std of per-pixel grain; sets the JPEG size (about 110 KB at the defaults)
_NAME = re.compile(r"^class_\d{3,}$")


def _hsv_to_rgb(h: float, s: float, v: float) -> np.ndarray:
    i = int(h * 6) % 6
    f = h * 6 - int(h * 6)
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    return np.array([(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][i]) * 255


def _texture(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    out = np.zeros((h, w), np.float32)
    for cells, amp in ((6, 18.0), (24, 12.0), (96, 10.0), (250, 10.0)):
        small = rng.standard_normal((max(2, cells * h // w), cells)).astype(np.float32)
        img = Image.fromarray(small).resize((w, h), Image.BICUBIC)
        out += amp * np.asarray(img)
    return out


def render_image(
    index: int, label: int, classes: int, size: tuple[int, int], seed: int
) -> Image.Image:
    """The RGB image ``index`` (of class ``label``) of the dataset made with ``seed``."""
    w, h = size
    rng = np.random.default_rng([seed, index])
    hue = (label / max(classes, 1) + rng.normal(0, 0.03)) % 1.0
    corners = [
        _hsv_to_rgb((hue + rng.normal(0, 0.08)) % 1, rng.uniform(0.3, 0.8), rng.uniform(0.35, 0.95))
        for _ in range(4)
    ]
    ys = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
    xs = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
    c = [np.asarray(k, np.float32) for k in corners]
    base = (c[0] * (1 - xs) + c[1] * xs) * (1 - ys) + (c[2] * (1 - xs) + c[3] * xs) * ys
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    kind = label % 3
    for _ in range(int(rng.integers(3, 8))):
        x0, y0 = rng.uniform(-0.1, 0.9) * w, rng.uniform(-0.1, 0.9) * h
        x1, y1 = x0 + rng.uniform(0.1, 0.5) * w, y0 + rng.uniform(0.1, 0.5) * h
        colour = tuple(
            int(v) for v in _hsv_to_rgb(rng.uniform(), rng.uniform(0.2, 1), rng.uniform(0.2, 1))
        )
        if kind == 0:
            draw.ellipse((x0, y0, x1, y1), fill=colour)
        elif kind == 1:
            draw.rectangle((x0, y0, x1, y1), fill=colour)
        else:
            pts = [
                (rng.uniform(x0, x1), rng.uniform(y0, y1)) for _ in range(int(rng.integers(3, 7)))
            ]
            draw.polygon(pts, fill=colour)
    img = img.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.8, 2.0))))
    arr = np.asarray(img, np.float32)
    arr = arr + _texture(rng, h, w)[:, :, None] * rng.uniform(0.5, 1.0, 3).astype(np.float32)
    arr += rng.standard_normal((h, w, 1), dtype=np.float32) * _GRAIN
    arr += rng.standard_normal((h, w, 3), dtype=np.float32) * (_GRAIN / 3)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def _write(job: tuple[int, int, int, tuple[int, int], int, int, str]) -> int:
    index, label, classes, size, seed, quality, path = job
    buf = io.BytesIO()
    render_image(index, label, classes, size, seed).save(buf, "JPEG", quality=quality)
    Path(path).write_bytes(buf.getvalue())
    return buf.tell()


def _check(images: int, classes: int, size: tuple[int, int], quality: int) -> None:
    if images < 1:
        raise ConfigError(f"--images: must be at least 1, got {images}")
    if not 1 <= classes <= images:
        raise ConfigError(f"--classes: must be between 1 and --images ({images}), got {classes}")
    if min(size) < 8 or max(size) > 10000:
        raise ConfigError(f"--size: width and height must be 8..10000, got {size[0]}x{size[1]}")
    if not 1 <= quality <= 100:
        raise ConfigError(f"--quality: must be 1..100, got {quality}")


def make_dataset(
    root: str | Path,
    images: int,
    classes: int,
    *,
    size: tuple[int, int] = defaults.DATASET_SIZE,
    quality: int = defaults.DATASET_QUALITY,
    seed: int = defaults.DATASET_SEED,
    force: bool = False,
    workers: int | None = None,
    progress: bool = True,
) -> dict[str, float]:
    """Write ``images`` JPEGs in ``classes`` folders (``class_000``...) under ``root``.

    Refuses a non-empty ``root`` unless ``force``; with ``force`` only earlier ``class_*``
    folders are removed. Returns ``{"images", "bytes", "mean_kb"}``.
    """
    from tqdm import tqdm

    _check(images, classes, size, quality)
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise DatasetError(f"not a directory: {root}")
    if root.exists() and any(root.iterdir()):
        if not force:
            raise DatasetError(f"refusing to write into non-empty directory {root} (use --force)")
        for old in root.iterdir():
            if old.is_dir() and _NAME.match(old.name):
                shutil.rmtree(old)
    digits = max(3, len(str(classes - 1)))
    for c in range(classes):
        (root / f"class_{c:0{digits}d}").mkdir(parents=True, exist_ok=True)
    jobs = [
        (
            i,
            i % classes,
            classes,
            size,
            seed,
            quality,
            str(root / f"class_{i % classes:0{digits}d}" / f"img_{i:07d}.jpg"),
        )
        for i in range(images)
    ]
    total = 0
    with (
        ProcessPoolExecutor(max_workers=workers) as pool,
        # a progress bar on a terminal only (None: tqdm decides)
        tqdm(
            total=images,
            desc=f"make-dataset {root}",
            unit="img",
            disable=None if progress else True,
        ) as bar,
    ):
        for n in pool.map(_write, jobs, chunksize=16):
            total += n
            bar.update(1)
    return {"images": images, "bytes": total, "mean_kb": total / images / 1000}
