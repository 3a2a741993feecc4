"""A PyTorch-style training loop that keeps its own checkpoints (hetflow's ``checkpoint: {mode: app}``).

Logistic regression on a synthetic, seeded data set, trained by minibatch SGD in NumPy.  The
contract it follows (docs/guides/checkpoints.md):

- state goes to ``$HETFLOW_CHECKPOINT_DIR/last.npz`` every ``--save-every`` iterations, as
  ``torch.save`` of a dict would: {iteration, weights, RNG state, loss}; written to a temporary
  file and renamed over the old one (``os.replace`` is atomic), so a kill at any instant leaves
  the last complete checkpoint, never half of one;
- on start, the latest checkpoint is loaded if there is one ("resumed from iteration N");
  the RNG state is part of it, so a stopped-and-resumed run computes exactly what an
  uninterrupted one does;
- SIGTERM (hetflow stop, preemption; SIGKILL follows ``stop_grace`` later): finish the
  iteration, save, exit 143 (128 + SIGTERM), as torchrun-elastic workers do: the attempt is
  over but the work is not, so hetflow records it stopped (and a scheduler requeues it), never
  succeeded;
- SIGUSR1 (``checkpoint: {mode: app, every: 30m}``): save at the end of this iteration, go on.

At the end it writes ``--out`` (JSON: iterations, final loss, accuracy, weights).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

CHECKPOINT = "last.npz"
EXIT_STOPPED = 143  # 128 + SIGTERM: saved, not finished


def make_data(seed: int, n: int = 2048, dim: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """A linearly separable-ish problem: labels from a hidden weight vector plus noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim))
    hidden = rng.normal(size=dim)
    y = (x @ hidden + 0.5 * rng.normal(size=n) > 0).astype(np.float64)
    return x, y


def loss_and_grad(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    p = 1.0 / (1.0 + np.exp(-(x @ w)))
    eps = 1e-12
    loss = float(-np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps)))
    return loss, x.T @ (p - y) / len(y)


def save(folder: Path, state: dict[str, Any]) -> None:
    """``torch.save``-like, atomically: write a temporary file, then rename it over the last."""
    tmp = folder / f".{CHECKPOINT}.tmp"
    meta = {"iteration": state["iteration"], "loss": state["loss"], "rng": state["rng"]}
    with open(tmp, "wb") as f:
        np.savez(f, weights=state["weights"], meta=np.array(json.dumps(meta)))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / CHECKPOINT)


def load(folder: Path) -> dict[str, Any] | None:
    path = folder / CHECKPOINT
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        return {**meta, "weights": z["weights"].copy()}


class Signals:
    """Flags set by the handlers; the loop acts on them between iterations (a handler that
    saved itself could interrupt a save in progress)."""

    def __init__(self) -> None:
        self.stop = False
        self.save = False
        signal.signal(signal.SIGTERM, self._term)
        signal.signal(signal.SIGUSR1, self._usr1)

    def _term(self, signum: int, frame: object) -> None:
        self.stop = True

    def _usr1(self, signum: int, frame: object) -> None:
        self.save = True


def train(args: argparse.Namespace, folder: Path, flags: Signals | None = None) -> int:
    x, y = make_data(args.seed)
    state = load(folder)
    rng = np.random.default_rng(args.seed + 1)
    if state is None:
        w, start, loss = np.zeros(x.shape[1]), 0, float("nan")
        print("starting from iteration 0", flush=True)
    else:
        w, start, loss = state["weights"], int(state["iteration"]), float(state["loss"])
        rng.bit_generator.state = state["rng"]
        print(f"resumed from iteration {start} (loss {loss:.4f})", flush=True)

    def snapshot(i: int) -> None:
        save(folder, {"iteration": i, "weights": w, "rng": rng.bit_generator.state, "loss": loss})

    for i in range(start, args.iterations):
        batch = rng.integers(0, len(y), size=args.batch)
        loss, grad = loss_and_grad(w, x[batch], y[batch])
        w = w - args.lr * grad
        done = i + 1
        if args.pause:
            time.sleep(args.pause)  # stands in for the real work of an iteration
        if flags is not None and flags.stop:
            snapshot(done)
            print(f"SIGTERM: saved iteration {done}; exiting {EXIT_STOPPED}", flush=True)
            return EXIT_STOPPED
        if done % args.save_every == 0 or (flags is not None and flags.save):
            snapshot(done)
            why = "SIGUSR1" if flags is not None and flags.save else "every"
            if flags is not None:
                flags.save = False
            print(f"saved iteration {done} ({why}), loss {loss:.4f}", flush=True)
    full, _ = loss_and_grad(w, x, y)
    accuracy = float(np.mean(((x @ w) > 0) == (y > 0.5)))
    result = {"iterations": args.iterations, "loss": full, "accuracy": accuracy, "weights": w.tolist()}
    Path(args.out).write_text(json.dumps(result) + "\n")
    print(f"done: {args.iterations} iterations, loss {full:.4f}, accuracy {accuracy:.3f}", flush=True)
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pause", type=float, default=0.0, help="seconds of sleep per iteration")
    p.add_argument("--out", default="/out/result.json")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    where = os.environ.get("HETFLOW_CHECKPOINT_DIR")
    if not where:
        print("HETFLOW_CHECKPOINT_DIR is not set: give the step checkpoint: {mode: app}", file=sys.stderr)
        return 2
    return train(args, Path(where), Signals())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
