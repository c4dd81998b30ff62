"""The promotion policy's two judgements, pure: the evaluation gate (the candidate's score against the champion's
on the same held-out set) and the canary's (the candidate's live figures against the policy's limits).

Both read data that comes back from nodes: an evaluation's JSON line and a model server's Prometheus text. Each is
parsed into the narrowest shape it may have (a pydantic model, prometheus_client's parser), its size bounded, and
refused with the reason when it is anything else; nothing in it is evaluated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal, TypeVar

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aisite import foreign
from aisite.plan.types import CanaryPlan, PromotionPlan

MAX_TEXT = 1 << 20  # a server's /metrics or an evaluation's output beyond this is refused unread
Score = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
M = TypeVar("M", bound=BaseModel)


class PolicyInputError(ValueError):
    """What a node sent back is not what the judgement reads; the message says what and where from."""


class Evaluation(BaseModel):
    """An evaluation's result line (payloads/evaluate.py): only these fields, each of its type."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    schema_: Literal["aisite.eval/v1"] = Field(alias="schema")
    samples: Annotated[int, Field(ge=1, le=1 << 40)]
    top1_accuracy: Score
    top5_accuracy: Score


def first_problem(exc: ValidationError) -> str:
    """A validation error's first problem as `where: what` (the field's path in what was sent), bounded."""
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return str(exc).splitlines()[0][:200]
    where = ".".join(str(x) for x in errors[0]["loc"])
    return f"{where}: {errors[0]['msg']}"[:200] if where else str(errors[0]["msg"])[:200]


def result_line(text: str, source: str) -> object:
    """A payload's result: the last line of its output that is a JSON object (a warning may follow or precede it),
    decoded, not yet checked; PolicyInputError naming the source."""
    if len(text) > MAX_TEXT:
        raise PolicyInputError(f"{source}: {len(text)} characters of output, more than a payload prints")
    lines = [line for line in text.strip().splitlines() if line.startswith("{")]
    if not lines:
        raise PolicyInputError(f"{source}: printed no result line")
    try:
        doc: object = foreign.loads(lines[-1], MAX_TEXT)
    except foreign.ForeignJSONError as exc:
        raise PolicyInputError(f"{source}: its result line: {exc}") from None
    return doc


def parse_result(model: type[M], schema: str, text: str, source: str) -> M:
    """A payload's result line held to its model, or PolicyInputError naming the source and the first problem."""
    try:
        return model.model_validate(result_line(text, source))
    except ValidationError as exc:
        raise PolicyInputError(f"{source}: not an {schema} result ({first_problem(exc)})") from None


def parse_evaluation(text: str, source: str) -> Evaluation:
    """The last line of an evaluation's output as its result, or PolicyInputError naming the source."""
    return parse_result(Evaluation, "aisite.eval/v1", text, source)


@dataclass(frozen=True)
class Gate:
    """The evaluation gate's verdict, with the figures it was reached on."""

    passed: bool
    metric: str
    champion: float
    candidate: float
    margin: float
    samples: int

    @property
    def reason(self) -> str:
        verdict = "beats" if self.passed else "does not beat"
        return (
            f"{self.metric} {self.candidate:.4f} {verdict} the champion's {self.champion:.4f} by more than "
            f"{self.margin:g} ({self.samples} held-out samples)"
        )


def gate(policy: PromotionPlan, champion: Evaluation, candidate: Evaluation) -> Gate:
    if champion.samples != candidate.samples:
        raise PolicyInputError(
            f"champion and candidate were scored on {champion.samples} and {candidate.samples} samples: the gate "
            "compares scores of one held-out set"
        )
    a = float(getattr(champion, policy.metric))
    b = float(getattr(candidate, policy.metric))
    return Gate(b - a > policy.margin, policy.metric, a, b, policy.margin, champion.samples)


@dataclass(frozen=True)
class ServerFigures:
    """A model server's counters at one moment (aisite_serving_* of payloads/serve.py)."""

    version: str
    requests: dict[str, float]  # by status code
    buckets: tuple[tuple[float, float], ...]  # (upper edge in seconds, cumulative count), +Inf last
    confidence_sum: float
    answers: float


def parse_metrics(text: str, source: str, version: str) -> ServerFigures:
    """A model server's /metrics as figures; PolicyInputError when it is not one, or another version's."""
    if len(text) > MAX_TEXT:
        raise PolicyInputError(f"{source}: {len(text)} characters of metrics, more than a model server serves")
    requests: dict[str, float] = {}
    buckets: dict[float, float] = {}
    confidence = answers = None
    versions: set[str] = set()
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if not s.name.startswith("aisite_serving_"):
                    continue
                if s.value < 0 or not math.isfinite(s.value):
                    raise PolicyInputError(f"{source}: {s.name} is {s.value}, not a count")
                versions.add(s.labels.get("version", ""))
                if s.name == "aisite_serving_requests_total":
                    requests[s.labels.get("code", "")] = s.value
                elif s.name == "aisite_serving_request_seconds_bucket":
                    buckets[float(s.labels["le"])] = s.value
                elif s.name == "aisite_serving_confidence_total":
                    confidence = s.value
                elif s.name == "aisite_serving_answers_total":
                    answers = s.value
    except (ValueError, KeyError, TypeError) as exc:
        raise PolicyInputError(f"{source}: not Prometheus text a model server serves ({exc})") from None
    if versions != {version}:
        raise PolicyInputError(f"{source}: serves version(s) {sorted(versions)}, not {version!r}")
    if confidence is None or answers is None or math.inf not in buckets:
        raise PolicyInputError(f"{source}: its request histogram or confidence counters are missing")
    return ServerFigures(version, requests, tuple(sorted(buckets.items())), confidence, answers)


def parse_servers(texts: Mapping[str, str], source: str, version: str) -> dict[str, ServerFigures]:
    """Each server's /metrics (by where it was read: a replica, a pod) as figures of `version`; PolicyInputError
    when none answered or one is not a server of that version."""
    if not texts:
        raise PolicyInputError(f"{source}: no server of it answered")
    return {where: parse_metrics(text, f"{source} {where}", version) for where, text in texts.items()}


def _quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus's histogram_quantile over cumulative buckets (linear within a bucket); None with no samples."""
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_edge, lower_count = 0.0, 0.0
    for edge, count in buckets:
        if count >= rank:
            if math.isinf(edge):
                return lower_edge  # beyond the last finite edge: its edge, as Prometheus answers
            span = count - lower_count
            return lower_edge + (edge - lower_edge) * ((rank - lower_count) / span if span else 1.0)
        lower_edge, lower_count = edge, count
    return lower_edge


@dataclass(frozen=True)
class Window:
    """The candidate's live figures over the canary: the difference of two readings."""

    requests: int
    errors: int
    p95_ms: float | None
    mean_confidence: float | None

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


def window(before: ServerFigures, after: ServerFigures) -> Window:
    return windows({"": before}, {"": after})


def windows(before: Mapping[str, ServerFigures], after: Mapping[str, ServerFigures]) -> Window:
    """The candidate's window over all its servers (a replica each, by source): each server's counters' difference,
    summed. A server read before and gone after, or whose counters went backwards, restarted during the canary: no
    window. One that came up during it counts from zero, as Prometheus's increase() counts a new series."""
    gone = sorted(set(before) - set(after))
    if gone:
        raise PolicyInputError(f"{', '.join(gone)[:200]}: gone during the canary, its requests unaccounted")
    codes: dict[str, float] = {}
    buckets: dict[float, float] = {}
    confidence = answers = 0.0
    edges: set[float] | None = None
    for source, a in sorted(after.items()):
        b = before.get(source, ServerFigures(a.version, {}, tuple((e, 0.0) for e, _ in a.buckets), 0.0, 0.0))
        where = f"{source}: " if source else ""
        if b.version != a.version:
            raise PolicyInputError(f"{where}the server changed version during the canary ({b.version} -> {a.version})")
        if edges is not None and edges != {e for e, _ in a.buckets}:
            raise PolicyInputError(f"{where}its latency histogram has other buckets than the other servers'")
        edges = {e for e, _ in a.buckets}
        delta = {c: a.requests.get(c, 0.0) - b.requests.get(c, 0.0) for c in set(b.requests) | set(a.requests)}
        edges_before = dict(b.buckets)
        counts = [(edge, count - edges_before.get(edge, 0.0)) for edge, count in a.buckets]
        more = (a.confidence_sum - b.confidence_sum, a.answers - b.answers)
        if any(v < 0 for v in [*delta.values(), *(c for _, c in counts), *more]):
            raise PolicyInputError(f"{where}the server's counters went backwards: it restarted during the canary")
        for c, v in delta.items():
            codes[c] = codes.get(c, 0.0) + v
        for edge, count in counts:
            buckets[edge] = buckets.get(edge, 0.0) + count
        confidence, answers = confidence + more[0], answers + more[1]
    requests = int(sum(codes.values()))
    errors = int(sum(v for c, v in codes.items() if c.startswith("5")))
    p95 = _quantile(0.95, sorted(buckets.items())) if buckets else None
    mean = confidence / answers if answers > 0 else None
    return Window(requests, errors, None if p95 is None else p95 * 1000, mean)


@dataclass(frozen=True)
class Verdict:
    """The canary's verdict: every limit crossed (empty when it passed)."""

    window: Window
    crossed: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.crossed


def judge(canary: CanaryPlan, w: Window) -> Verdict:
    crossed = []
    if w.requests < canary.min_requests:
        crossed.append(f"{w.requests} requests reached it, fewer than the {canary.min_requests} that decide")
    if w.error_rate > canary.max_error_rate:
        crossed.append(f"error rate {w.error_rate:.4f} over {canary.max_error_rate:g} ({w.errors} of {w.requests})")
    if w.p95_ms is not None and w.p95_ms > canary.max_p95_latency_ms:
        crossed.append(f"p95 latency {w.p95_ms:.1f} ms over {canary.max_p95_latency_ms:g} ms")
    if canary.min_mean_confidence is not None and (
        w.mean_confidence is None or w.mean_confidence < canary.min_mean_confidence
    ):
        shown = "none" if w.mean_confidence is None else f"{w.mean_confidence:.4f}"
        crossed.append(f"mean confidence {shown} under {canary.min_mean_confidence:g}")
    return Verdict(w, crossed)
