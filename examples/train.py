#!/usr/bin/env python3
"""A tiny but real training run for labq demos: logistic regression on synthetic data, plain SGD,
pure Python (no numpy or torch needed).

It trains for about --seconds of wall time split into --epochs epochs, prints the loss after each
epoch, and writes a checkpoint (weights, epoch, time trained) into $LABQ_CHECKPOINT_DIR (else
./checkpoints) after every epoch. Started again with a checkpoint present — after a preemption or
a node failure — it resumes where that checkpoint left off and only trains the time that remains.
SIGTERM (labq's time limit or cancel) saves a checkpoint before exiting.

    python examples/train.py --seconds 4 --lr 0.1 --seed 0

Without --seconds it trains for two minutes: long enough to watch it in `labq stat` and cancel it
(the README's Quick start).
"""
import argparse
import json
import math
import os
import random
import signal
import sys
import time

FEATURES = 8
SAMPLES = 2000
CHECKPOINT = "train.json"


def dataset(seed: int) -> list[tuple[list[float], int]]:
    """Points labelled by a hidden linear rule, with 5 % label noise; the same for a given seed, so
    a resumed run sees the data it was trained on."""
    rng = random.Random(seed)
    truth = [rng.uniform(-2, 2) for _ in range(FEATURES)]
    data = []
    for _ in range(SAMPLES):
        x = [rng.gauss(0, 1) for _ in range(FEATURES)]
        y = int(sum(w * v for w, v in zip(truth, x)) > 0)
        data.append((x, 1 - y if rng.random() < 0.05 else y))
    return data


def sigmoid(z: float) -> float:
    if z >= 0:
        return 1 / (1 + math.exp(-z))
    e = math.exp(z)
    return e / (1 + e)


def sgd_pass(w: list[float], b: float, data, lr: float, rng: random.Random) -> float:
    order = list(range(len(data)))
    rng.shuffle(order)
    for i in order:
        x, y = data[i]
        g = sigmoid(sum(wi * xi for wi, xi in zip(w, x)) + b) - y
        for j in range(FEATURES):
            w[j] -= lr * g * x[j]
        b -= lr * g
    return b


def evaluate(w: list[float], b: float, data) -> tuple[float, float]:
    """(mean log loss, accuracy)."""
    loss, right = 0.0, 0
    for x, y in data:
        p = min(max(sigmoid(sum(wi * xi for wi, xi in zip(w, x)) + b), 1e-12), 1 - 1e-12)
        loss -= y * math.log(p) + (1 - y) * math.log(1 - p)
        right += (p >= 0.5) == bool(y)
    return loss / len(data), right / len(data)


def load(path: str, args) -> dict:
    fresh = {"epoch": 0, "trained_s": 0.0, "w": [0.0] * FEATURES, "b": 0.0}
    try:
        with open(path) as f:
            state = json.load(f)
    except FileNotFoundError:
        return fresh
    except (OSError, ValueError) as e:
        print(f"ignoring unreadable checkpoint {path}: {e}", flush=True)
        return fresh
    if len(state.get("w", ())) != FEATURES or state.get("seed") != args.seed:
        print(f"checkpoint {path} is for another run; starting fresh", flush=True)
        return fresh
    print(f"resuming from {path}: epoch {state['epoch']}, {state['trained_s']:.1f}s trained", flush=True)
    return state


def save(path: str, state: dict) -> None:
    """Write-then-rename, so a kill mid-write leaves the previous checkpoint intact."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def train(args, state: dict, data, path: str, stop: dict) -> dict:
    """Epochs from the checkpointed one on; returns the last state (saved after every epoch)."""
    w, b = list(state["w"]), state["b"]
    rng = random.Random(args.seed * 7919 + state["epoch"])    # a resumed run does not replay shuffles
    slice_s = args.seconds / max(1, args.epochs)
    while state["epoch"] < args.epochs and stop["signal"] is None:
        t0, passes = time.monotonic(), 0
        # An epoch is its share of the wall time, at least one pass: same length on any machine.
        while (passes == 0 or time.monotonic() - t0 < slice_s) and stop["signal"] is None:
            b = sgd_pass(w, b, data, args.lr, rng)
            passes += 1
        loss, acc = evaluate(w, b, data)
        state = {"epoch": state["epoch"] + 1, "trained_s": state["trained_s"] + time.monotonic() - t0,
                 "w": w, "b": b, "seed": args.seed, "lr": args.lr, "loss": loss}
        save(path, state)
        print(f"epoch {state['epoch']}/{args.epochs} passes={passes} loss={loss:.4f} acc={acc:.3f}", flush=True)
    return state


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=120.0, help="total wall time to train (default 120)")
    p.add_argument("--epochs", type=int, default=24, help="checkpoints and loss lines (default 24)")
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (default 0.1)")
    p.add_argument("--seed", type=int, default=0, help="data and shuffling seed (default 0)")
    args = p.parse_args(argv)
    ckdir = os.environ.get("LABQ_CHECKPOINT_DIR") or os.path.join(os.getcwd(), "checkpoints")
    os.makedirs(ckdir, exist_ok=True)
    path = os.path.join(ckdir, CHECKPOINT)
    stop = {"signal": None}
    # Finish the current pass, save, exit: labq sends SIGTERM kill_wait before SIGKILL.
    signal.signal(signal.SIGTERM, lambda sig, _: stop.update(signal=sig))
    state = load(path, args)
    print(f"job {os.environ.get('LABQ_JOB_ID', '-')}: lr={args.lr} seed={args.seed} samples={SAMPLES} "
          f"epochs={args.epochs}", flush=True)
    state = train(args, state, dataset(args.seed), path, stop)
    if stop["signal"] is not None:
        print(f"got {signal.Signals(stop['signal']).name}: checkpoint saved at epoch {state['epoch']}", flush=True)
        return 128 + stop["signal"]
    print(f"done: loss={state.get('loss', float('nan')):.4f} after {state['trained_s']:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
