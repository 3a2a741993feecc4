"""Step 6 (GPU, optional): lithography simulation of the placed layout.

The placement is drawn as a mask (each placed cell a rectangle in its site) and imaged
by a 193 nm immersion scanner (NA 1.35) with an annular source, by Abbe's method: for
each of --sources source points, the mask spectrum is filtered by the pupil shifted
to that point and transformed back, and the intensities are averaged.  That is two
FFTs of the whole layout per source point: cheap on a GPU, slow on a CPU for a real
chip, hence a GPU-only step; the workflow marks it optional so a machine without a
GPU skips it.  (Without --gpu the same code runs on NumPy, for tests.)

Reported: how faithfully the resist prints the mask, cells that fail to print
("missing") and sites where neighbours print into each other ("bridging").
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from common import Timer, array_module, load, save, sync, to_host, write_json

WAVELENGTH_NM = 193.0
NA = 1.35
SIGMA_INNER, SIGMA_OUTER = 0.6, 0.9
PIXEL_NM = 20.0
SITE_PIXELS = 8  # a 160 nm site
CELL = (slice(1, 7), slice(1, 6))  # the footprint of a cell in its site: 120 x 100 nm
# Resist threshold, as a fraction of the clear-field intensity: 0.26 bridges neighbours
# on the default layout and 0.29 loses a cell, so 0.27 sits inside the process window.
THRESHOLD = 0.27


def mask_of(xy: np.ndarray, die: tuple[int, int]) -> np.ndarray:
    """The layout as a float32 image, rows = y; one cell rectangle per placed gate."""
    width, height = die
    sites = np.zeros((height, width), dtype=bool)
    sites[xy[:, 1], xy[:, 0]] = True
    tile = np.zeros((SITE_PIXELS, SITE_PIXELS), dtype=np.float32)
    tile[CELL] = 1.0
    return np.kron(sites, tile).astype(np.float32)


def aerial_image(xp: ModuleType, mask: Any, sources: int) -> Any:
    """Abbe imaging: the mean over source points of |IFFT(FFT(mask) * shifted pupil)|^2;
    1.0 is the intensity of an open (all-clear) mask."""
    rows, cols = mask.shape
    cutoff = NA / WAVELENGTH_NM * PIXEL_NM  # the pupil radius in cycles per pixel
    fy = xp.fft.fftfreq(rows)[:, None]
    fx = xp.fft.fftfreq(cols)[None, :]
    spectrum = xp.fft.fft2(mask.astype(xp.complex64))
    sigma = (SIGMA_INNER + SIGMA_OUTER) / 2
    intensity = xp.zeros(mask.shape, dtype=xp.float32)
    for k in range(sources):
        angle = 2 * np.pi * (k + 0.5) / sources
        sx, sy = sigma * cutoff * np.cos(angle), sigma * cutoff * np.sin(angle)
        pupil = ((fx + sx) ** 2 + (fy + sy) ** 2) <= cutoff**2
        field = xp.fft.ifft2(spectrum * pupil)
        intensity += (field.real**2 + field.imag**2).astype(xp.float32)
    return intensity / sources


def hotspots(printed: np.ndarray, sites: np.ndarray) -> dict[str, int]:
    """Cells printing under half their footprint, and sites whose gap pixels (outside
    the cell footprint) print, which shorts the cell to a neighbour."""
    height, width = sites.shape
    per_site = printed.reshape(height, SITE_PIXELS, width, SITE_PIXELS).swapaxes(1, 2)
    footprint = np.zeros((SITE_PIXELS, SITE_PIXELS), dtype=bool)
    footprint[CELL] = True
    inside = per_site[..., footprint].mean(axis=-1)
    gaps = per_site[..., ~footprint].sum(axis=-1)
    return {
        "missing": int(((inside < 0.5) & sites).sum()),
        "bridging": int(((gaps >= 2) & sites).sum()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--placement", type=Path, required=True, help="placement .npz")
    parser.add_argument("--out", type=Path, required=True, help="the aerial image .npz")
    parser.add_argument("--report", type=Path, required=True, help="a .json summary")
    parser.add_argument("--sources", type=int, default=16, help="source points (Abbe)")
    parser.add_argument("--gpu", action="store_true", help="image on CuPy instead of NumPy")
    args = parser.parse_args(argv)
    timer = Timer()
    xp, device = array_module(args.gpu)
    placed = load(args.placement)
    width, height = (int(d) for d in placed["die"])
    mask = mask_of(placed["xy"], (width, height))
    compute = Timer()
    intensity = aerial_image(xp, xp.asarray(mask), max(args.sources, 1))
    sync(xp)
    seconds = compute()
    aerial = to_host(intensity)
    printed = aerial >= THRESHOLD
    sites = np.zeros((height, width), dtype=bool)
    sites[placed["xy"][:, 1], placed["xy"][:, 0]] = True
    found = hotspots(printed, sites)
    drawn = mask > 0.5
    save(args.out, aerial=aerial, printed=np.packbits(printed, axis=1))
    summary = {
        "device": device,
        "image_pixels": list(mask.shape),
        "pixel_nm": PIXEL_NM,
        "sources": args.sources,
        "threshold": THRESHOLD,
        "pattern_error": round(float((printed != drawn).sum() / drawn.sum()), 4),
        "contrast": round(float(aerial[drawn].mean() - aerial[~drawn].mean()), 4),
        "hotspots": found,
        "compute_seconds": seconds,
        "seconds": timer(),
    }
    write_json(args.report, summary)
    print(
        f"litho: {mask.shape[1]}x{mask.shape[0]} px, {args.sources} source points: pattern "
        f"error {summary['pattern_error']:.1%}, {found['missing']} missing cells, "
        f"{found['bridging']} bridging sites; {seconds}s on {device}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
