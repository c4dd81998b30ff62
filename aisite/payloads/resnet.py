"""ResNet-50 / ResNet-152 training or inference throughput on synthetic data or a data set's files (`--data`), one
process per GPU (or per CPU slot), DDP across processes and nodes; prints one result line (result.py's schema) from
rank 0.

    python3 resnet.py --model resnet50 --mode train --batch-size 256          # one GPU
    torchrun --nnodes 2 --nproc-per-node 8 ... resnet.py --mode train         # DDP, env:// rendezvous

The process group comes from the environment torchrun (or the Kubeflow trainer) sets (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT), or Open MPI's (OMPI_COMM_WORLD_*) under mpirun with MASTER_ADDR given.
GPUs: NCCL, mixed precision (bf16 where supported), channels_last, data generated on the GPU once, optional
torch.compile. CPUs: gloo, float32. Warm-up steps are not timed; every rank times its own steps and rank 0 reports
images/s per process and their sum.
"""

from __future__ import annotations

import argparse
import os
import pickle  # its error only: checkpoints load with weights_only, never unpickled freely
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

try:  # inside the package (the controller, tests) or as a plain script beside result.py (the job containers)
    from aisite.payloads.result import Timer, emit, now, result
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from result import Timer, emit, now, result  # type: ignore[import-not-found,no-redef]

LAYERS = {"resnet50": (3, 4, 6, 3), "resnet152": (3, 8, 36, 3)}
# A data set's sample: one file, a label byte then the image's 3 x side x side bytes (channels first).
SAMPLE_SUFFIX = ".sample"


def sample_bytes(image_size: int) -> int:
    return 1 + 3 * image_size * image_size


def write_samples(directory: Path, count: int, image_size: int, seed: int = 0, classes: int = 0) -> int:
    """A data set of `count` samples in `directory` (made if missing), as `--data` reads it; its bytes. Random bytes
    (throughput runs), or with `classes` a set a model can learn: each class's images are noise around its own
    colour (the same colours for every seed, so a training set and a held-out set of other seeds agree)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    size = sample_bytes(image_size)
    colours = [random.Random(f"class-{k}").randbytes(3) for k in range(classes)]
    pixels = image_size * image_size
    for i in range(count):
        if classes:
            label = rng.randrange(classes)
            data = bytes([label]) + bytes(
                min(255, max(0, c + int(rng.gauss(0, NOISE)))) for c in colours[label] for _ in range(pixels)
            )
        else:
            data = rng.randbytes(size)
        (directory / f"{i:06d}{SAMPLE_SUFFIX}").write_bytes(data)
    return count * size


# The noise (standard deviation, in 0-255 levels) around a learnable class's colour: classes overlap a little, so
# a model is better the longer it trains rather than perfect at once.
NOISE = 60.0
# A checkpoint: tensors and plain values only, loaded with torch.load(weights_only=True), which runs no code.
CHECKPOINT_KEYS = {"schema", "model", "image_size", "classes", "state_dict"}
CHECKPOINT_SCHEMA = "aisite.checkpoint/v1"


def save_checkpoint(model: nn.Module, path: str, name: str, image_size: int) -> None:
    """The model's weights with what a server needs to use them (network, input size, classes)."""
    inner = getattr(model, "_orig_mod", model)  # torch.compile's wrapper
    inner = inner.module if isinstance(inner, nn.parallel.DistributedDataParallel) else inner
    state = {k: v.detach().cpu() for k, v in inner.state_dict().items()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp"
    torch.save(
        {
            "schema": CHECKPOINT_SCHEMA,
            "model": name,
            "image_size": image_size,
            "classes": int(state["fc.weight"].shape[0]),
            "state_dict": state,
        },
        tmp,
    )
    os.replace(tmp, path)  # a reader never sees half a checkpoint


def load_checkpoint(path: str, name: str, device: torch.device) -> tuple[nn.Module, int]:
    """The checkpoint's model, in eval mode on `device`, and its image size. A checkpoint is data from storage:
    loaded as tensors only (weights_only), its keys and shapes checked against the network it claims to be."""
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as exc:
        raise SystemExit(f"{path}: not a checkpoint this server loads ({str(exc).splitlines()[0][:200]})") from None
    if not isinstance(ckpt, dict) or set(ckpt) != CHECKPOINT_KEYS or ckpt["schema"] != CHECKPOINT_SCHEMA:
        raise SystemExit(f"{path}: not an {CHECKPOINT_SCHEMA} checkpoint (keys {sorted(CHECKPOINT_KEYS)})")
    if ckpt["model"] != name:
        raise SystemExit(f"{path}: a {ckpt['model']!r} checkpoint, not {name!r}")
    size, classes = ckpt["image_size"], ckpt["classes"]
    if not (isinstance(size, int) and 16 <= size <= 1024 and isinstance(classes, int) and 1 <= classes <= 100_000):
        raise SystemExit(f"{path}: image_size {size!r} or classes {classes!r} out of range")
    model, _ = build_model(name, classes)
    try:
        model.load_state_dict(ckpt["state_dict"], strict=True)
    except (RuntimeError, TypeError) as exc:
        raise SystemExit(f"{path}: its weights do not fit {name}: {str(exc).splitlines()[0][:200]}") from None
    return model.to(device).eval(), size


class Samples:
    """A rank's share of a data set (every world-th file from its rank's), read a batch of files per step: the time
    and bytes the reads took are kept for the report."""

    def __init__(self, directory: str, image_size: int, rank: int, world: int) -> None:
        try:
            every = sorted(p for p in Path(directory).iterdir() if p.name.endswith(SAMPLE_SUFFIX))
        except OSError as exc:
            raise SystemExit(f"--data {directory}: {exc.strerror}") from None
        self.files = every[rank::world]
        if not self.files:
            raise SystemExit(f"--data {directory}: no *{SAMPLE_SUFFIX} file for rank {rank} of {world}")
        self.total = len(every)
        self.image_size = image_size
        self.size = sample_bytes(image_size)
        self.next = 0
        self.bytes = 0
        self.seconds = 0.0

    def batch(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = time.perf_counter()
        raw = bytearray()
        for _ in range(n):
            path = self.files[self.next % len(self.files)]
            self.next += 1
            data = path.read_bytes()
            if len(data) != self.size:
                raise SystemExit(f"{path}: {len(data)} bytes, a {self.image_size}-pixel sample has {self.size}")
            raw += data
        self.seconds += time.perf_counter() - start
        self.bytes += len(raw)
        rows = torch.frombuffer(raw, dtype=torch.uint8).view(n, self.size)
        images = rows[:, 1:].reshape(n, 3, self.image_size, self.image_size).float().div_(255.0)
        return images, rows[:, 0].long()


class Bottleneck(nn.Module):
    """torchvision's v1.5 bottleneck (stride on the 3x3 convolution), so weights and FLOPs match it."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out: torch.Tensor = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out = self.relu(out + identity)
        assert isinstance(out, torch.Tensor)
        return out


class ResNet(nn.Module):
    def __init__(self, layers: tuple[int, ...], num_classes: int = 1000) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._stage(64, layers[0], 1)
        self.layer2 = self._stage(128, layers[1], 2)
        self.layer3 = self._stage(256, layers[2], 2)
        self.layer4 = self._stage(512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512 * 4, num_classes)

    def _stage(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        down = None
        if stride != 1 or self.inplanes != planes * 4:
            down = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * 4, 1, stride=stride, bias=False), nn.BatchNorm2d(planes * 4)
            )
        mods = [Bottleneck(self.inplanes, planes, stride, down)]
        self.inplanes = planes * 4
        mods += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*mods)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        out: torch.Tensor = self.fc(torch.flatten(self.avgpool(x), 1))
        return out


def build_model(name: str, classes: int = 1000) -> tuple[nn.Module, str]:
    """torchvision's model where torchvision imports (NGC images), else the same network defined above (the same
    parameter names: a checkpoint of one loads into the other)."""
    try:
        import torchvision  # type: ignore[import-not-found,unused-ignore]

        model = getattr(torchvision.models, name)(weights=None, num_classes=classes)
        return model, f"torchvision {torchvision.__version__}"
    except Exception:  # PyPI's torchvision fails to import beside a CPU torch wheel; any failure means "use ours"
        return ResNet(LAYERS[name], classes), "payload"


def dist_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's variables or Open MPI's."""
    env = os.environ
    if "RANK" in env:
        return int(env["RANK"]), int(env.get("WORLD_SIZE", "1")), int(env.get("LOCAL_RANK", "0"))
    if "OMPI_COMM_WORLD_RANK" in env:
        return (
            int(env["OMPI_COMM_WORLD_RANK"]),
            int(env["OMPI_COMM_WORLD_SIZE"]),
            int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")),
        )
    return 0, 1, 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="resnet")
    p.add_argument("--model", choices=sorted(LAYERS), default="resnet50")
    p.add_argument("--mode", choices=("train", "infer"), default="train")
    p.add_argument("--batch-size", type=int, default=256, help="per process")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument(
        "--amp", choices=("auto", "bf16", "fp16", "off"), default="auto", help="auto: bf16 on GPUs that have it"
    )
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None, help="default: on GPUs")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--threads", type=int, default=0, help="CPU threads per process (0: torch's default)")
    p.add_argument("--nodes", type=int, default=0, help="for the report (default: WORLD_SIZE / LOCAL_WORLD_SIZE)")
    p.add_argument(
        "--data", default=None, help=f"a directory of *{SAMPLE_SUFFIX} files read each step (default: synthetic data)"
    )
    p.add_argument("--classes", type=int, default=1000, help="the classifier's classes")
    p.add_argument("--lr", type=float, default=0.1, help="SGD's learning rate (train)")
    p.add_argument("--save", default=None, help="train: write the trained model's checkpoint here (rank 0)")
    args = p.parse_args(argv)
    if args.save and args.mode != "train":
        p.error("--save: only a training run has a model to save")
    return args


def amp_dtype(args: argparse.Namespace, device: torch.device) -> torch.dtype | None:
    if device.type != "cuda" or args.amp == "off":
        return None
    if args.amp == "fp16" or (args.amp == "auto" and not torch.cuda.is_bf16_supported()):
        return torch.float16
    return torch.bfloat16


def step_fn(
    model: nn.Module,
    args: argparse.Namespace,
    device: torch.device,
    dtype: torch.dtype | None,
    samples: Samples | None = None,
) -> Callable[[], Any]:
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    fixed = (
        torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device).to(memory_format=fmt),
        torch.randint(0, 1000, (args.batch_size,), device=device),
    )

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        """The data set's next batch where there is one, else the same synthetic batch (made on the device once)."""
        if samples is None:
            return fixed
        images, labels = samples.batch(args.batch_size)
        return images.to(device).contiguous(memory_format=fmt), labels.to(device)

    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)
    if args.mode == "infer":
        model.eval()

        @torch.inference_mode()
        def infer() -> Any:
            images, _ = batch()
            with autocast:
                return model(images)

        return infer
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    loss_fn = nn.CrossEntropyLoss()

    def train() -> Any:
        images, labels = batch()
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = loss_fn(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return train


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = now()
    rank, world, local_rank = dist_env()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.channels_last is None:
        args.channels_last = cuda
    backend = None
    if world > 1:
        backend = "nccl" if cuda else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=world)
    model, source = build_model(args.model, args.classes)
    model = model.to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    if world > 1 and args.mode == "train":
        model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    if args.compile:
        model = torch.compile(model)  # type: ignore[assignment]
    dtype = amp_dtype(args, device)
    samples = Samples(args.data, args.image_size, rank, world) if args.data else None
    step = step_fn(model, args, device, dtype, samples)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    for _ in range(args.warmup):
        step()
    sync()
    if world > 1:
        dist.barrier()
    with Timer() as t:
        for _ in range(args.steps):
            step()
        sync()
    mine = args.batch_size * args.steps / t.seconds
    read = (samples.bytes, samples.seconds) if samples else (0, 0.0)
    rates: list[float] = [mine]
    reads: list[tuple[int, float]] = [read]
    if world > 1:
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, (mine, read))
        rates = [float(r) for r, _ in gathered]
        reads = [(int(b), float(s)) for _, (b, s) in gathered]
    if rank == 0:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1")))
        nodes = args.nodes or max(1, world // max(1, local_world))
        name = torch.cuda.get_device_name(device) if cuda else "cpu"
        emit(
            result(
                workload=args.workload,
                kind=f"{args.model}-{args.mode}",
                metric="images_per_second",
                unit="images/s",
                value=sum(rates),
                per_process=rates,
                world_size=world,
                nodes=nodes,
                device={"type": device.type, "name": name, "count": world if cuda else 0},
                backend=backend,
                params={
                    "model": args.model,
                    "model_source": source,
                    "mode": args.mode,
                    "batch_size": args.batch_size,
                    "image_size": args.image_size,
                    "warmup": args.warmup,
                    "steps": args.steps,
                    "precision": str(dtype).removeprefix("torch.") if dtype else "float32",
                    "channels_last": bool(args.channels_last),
                    "compile": args.compile,
                    "threads": torch.get_num_threads(),
                    # Warm-up steps read too: bytes and seconds of every step's reads, per process.
                    "data": {
                        "dir": args.data,
                        "files": samples.total,
                        "bytes_read": [b for b, _ in reads],
                        "read_seconds": [round(s, 3) for _, s in reads],
                    }
                    if samples
                    else "synthetic",
                },
                started=started,
                seconds=t.seconds,
                tool={"name": "torch", "version": torch.__version__},
            )
        )
    if rank == 0 and args.save:
        save_checkpoint(model, args.save, args.model, args.image_size)
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
