"""Served models: their versions, evaluation, canary and promotion."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from aisite.fields import (
    Account,
    DnsLabel,
    Image,
    RelPath,
)
from aisite.model.base import Name, Share, Strict, known_gpu_type

ServingModel = Literal["resnet50", "resnet152"]


class ModelVersion(Strict):
    """A trained model: its version (a label on its pods, in its metrics and in the promotion commits) and its
    checkpoint, a path inside its tenant's datasets storage (the model server loads tensors only, never code)."""

    version: DnsLabel
    artifact: RelPath


class Candidate(ModelVersion):
    # The share of requests (percent) the serving proxy sends it while its canary runs; `aisite promote` writes it.
    share: Annotated[int, Field(ge=1, le=99)]


class Evaluation(Strict):
    """The gate before a canary: champion and candidate are scored on the same held-out set."""

    # A directory of the tenant's datasets storage holding the held-out split (the payloads' file format).
    dataset: RelPath
    metric: Literal["top1_accuracy", "top5_accuracy"] = "top1_accuracy"
    # The candidate passes when its score exceeds the champion's by more than this (in the metric's units).
    margin: Annotated[float, Field(ge=0, le=1)] = 0.0


class CanaryLimits(Strict):
    """What the candidate's live traffic must stay within during its canary; crossing one rolls it back."""

    max_error_rate: Share = 0.01
    max_p95_latency_ms: Annotated[float, Field(gt=0, le=600_000)] = 500.0
    # The quality proxy: the mean top-1 probability of the candidate's answers (None: not judged).
    min_mean_confidence: Share | None = None


class Canary(Strict):
    share: Annotated[int, Field(ge=1, le=50)] = 10
    seconds: Annotated[int, Field(ge=10, le=7 * 86400)] = 600
    # Fewer requests than this to the candidate by the end of the canary decide nothing: it is rolled back.
    min_requests: Annotated[int, Field(ge=1, le=10_000_000)] = 100
    limits: CanaryLimits = CanaryLimits()


class Promotion(Strict):
    """How a new checkpoint of a training workload reaches a serving workload: the evaluation gate, the canary and
    who signs the promotion's commits (each change a commit to the site repository)."""

    # The training workload (site.workloads, a *-train kind of the same network) whose checkpoints it serves.
    training: Name
    evaluation: Evaluation
    canary: Canary = Canary()
    # Principals of gitops.allowed_signers whose keys may sign a promotion; empty: any allowed signer.
    signers: list[Account] = []
    # The reconciler runs the promotion of a new checkpoint itself; else only `aisite promote` does.
    automatic: bool = False


class Serving(Strict):
    """A model served over HTTP in a tenant: the champion, and a candidate while its canary runs, behind the
    serving proxy that splits the requests between them."""

    name: Name
    tenant: Name
    model: ServingModel = "resnet50"
    # The model server: the project's own (payloads/serve.py, KServe's v1 protocol) in the pinned PyTorch image.
    runtime: Literal["aisite-torch"] = "aisite-torch"
    # Replaces the runtime's pinned image.
    image: Image | None = None
    replicas: Annotated[int, Field(ge=1, le=10_000)] = 1
    # GPUs per replica; 0 serves on CPUs.
    gpus: Annotated[int, Field(ge=0, le=64)] = 0
    gpu_type: Annotated[str, AfterValidator(known_gpu_type)] | None = None
    cpus: Annotated[int, Field(ge=1, le=1024)] = 2
    memory_gi: Annotated[int, Field(ge=1, le=16_384)] = 8
    champion: ModelVersion
    candidate: Candidate | None = None
    promotion: Promotion | None = None
