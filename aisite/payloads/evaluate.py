"""A checkpoint's score on a held-out data set (resnet.py's sample files): top-1 and top-5 accuracy, one JSON line.

    python3 evaluate.py --model resnet50 --checkpoint models/v2.pt --data eval/ [--batch-size 64]

The promotion gate runs it on the champion's and the candidate's checkpoints with the same set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

try:  # inside the package (the controller, tests) or as a plain script beside resnet.py (the containers)
    from aisite.payloads.resnet import LAYERS, Samples, load_checkpoint
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from resnet import LAYERS, Samples, load_checkpoint  # type: ignore[import-not-found,no-redef]

SCHEMA = "aisite.eval/v1"


def evaluate(model: torch.nn.Module, samples: Samples, batch_size: int) -> dict[str, float | int]:
    """Every sample once: how often the label is the top class, or among the top five."""
    top1 = top5 = seen = 0
    with torch.inference_mode():
        while seen < samples.total:
            n = min(batch_size, samples.total - seen)
            images, labels = samples.batch(n)
            logits = model(images)
            best = logits.topk(min(5, logits.shape[1]), dim=1).indices
            top1 += int((best[:, 0] == labels).sum())
            top5 += int((best == labels[:, None]).any(dim=1).sum())
            seen += n
    return {"samples": seen, "top1_accuracy": top1 / seen, "top5_accuracy": top5 / seen}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(LAYERS), required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True, help="the held-out set's directory of sample files")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model, size = load_checkpoint(args.checkpoint, args.model, torch.device("cpu"))
    scores = evaluate(model, Samples(args.data, size, 0, 1), max(1, args.batch_size))
    doc = {"schema": SCHEMA, "model": args.model, "checkpoint": args.checkpoint, "data": args.data} | scores
    doc["seconds"] = round(time.perf_counter() - start, 3)
    print(json.dumps(doc, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
