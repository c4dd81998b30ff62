"""A promotion on a site: what `aisite promote` asks of the cluster, through its API server with the admin
kubeconfig the cluster layer fetches (as the drain reaches it).

- evaluate, checkpoints: a Job in the tenant's namespace (platform/serving.py's promotion_job: the model server's
  image, payloads and read-only storage, the tenant's Pod Security and Kueue queue). Its pod's log is read
  bounded, its last line is the result, parsed as any node's output; the Job is deleted after.
- apply: the served model's objects (platform/serving.py, the same the Workloads layer renders from the commit),
  applied server-side under the Workloads layer's field manager, so the reconciler's next pass of the same commit
  finds them unchanged; then, once the pods serve what the plan says, the objects of a role the plan no longer has
  (the candidate after its canary) deleted and their pods waited out.
- metrics: each ready server's own /metrics, through the API server's pod proxy. A canary's window is seconds
  long; Prometheus's scrape interval would blur it.
- traffic: the site's own users send the canary's requests; it waits the canary's seconds and reports what each
  version's servers answered meanwhile.

Everything the cluster answers is held to the narrowest shape it may have (names Kubernetes allows, the fields
read) and bounded; nothing in it is evaluated.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aisite import foreign
from aisite.fields import DnsSubdomain
from aisite.plan import Plan, ServedVersion, ServingPlan
from aisite.platform.serving import (
    PROMOTION_ROLE,
    PROXY_CONFIG,
    ROLE_LABEL,
    SERVER_PORT,
    VERSION_LABEL,
    evaluation_job,
    listing_job,
    retired_objects,
    retired_roles,
    selector,
    serving_objects,
)
from aisite.serving.policy import (
    MAX_TEXT,
    PolicyInputError,
    ServerFigures,
    first_problem,
    parse_result,
    parse_servers,
    windows,
)

Say = Callable[[str], None]
FIELD_MANAGER = "aisite"  # the Workloads layer's (playbooks/workloads.yml): one owner of the served objects' fields
# The Kubernetes resource (plural) of each kind a promotion applies, reads or deletes.
PLURALS = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "Deployment": "deployments",
    "Job": "jobs",
    "InferenceService": "inferenceservices",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "ServiceMonitor": "servicemonitors",
}
ROLLOUT_S = 900.0  # new pods pulled, scheduled and ready, or the step fails (and the canary rolls back)
JOB_WAIT_S = 2100.0  # past the Job's own deadline (JOB_DEADLINE_S): Kueue may hold it a while first
NOTE_S = 30.0
MAX_LISTING = 10_000


class ClusterError(Exception):
    """The cluster refused a step, or did not do it in time; the message names the object."""


# ----------------------------------------------------------------------------- what the cluster answers, narrowed
class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Meta(_Strict):
    name: DnsSubdomain
    labels: dict[Annotated[str, Field(max_length=317)], Annotated[str, Field(max_length=63)]] = {}
    # Only the proxy's configuration digest is read; a CNI's network status may be long (the answer is bounded).
    annotations: dict[Annotated[str, Field(max_length=317)], Annotated[str, Field(max_length=MAX_TEXT)]] = {}
    deletionTimestamp: str | None = None  # noqa: N815 - the API's name


class _Condition(_Strict):
    type: Annotated[str, Field(max_length=64)]
    status: Annotated[str, Field(max_length=16)]
    message: Annotated[str, Field(max_length=4096)] = ""


class _Status(_Strict):
    phase: Annotated[str, Field(max_length=32)] = ""
    conditions: Annotated[list[_Condition], Field(max_length=64)] = []


class _Object(_Strict):
    metadata: _Meta
    status: _Status = _Status()

    def condition(self, kind: str) -> _Condition | None:
        return next((c for c in self.status.conditions if c.type == kind and c.status == "True"), None)


class _List(_Strict):
    items: Annotated[list[_Object], Field(max_length=10_000)]


class _Listing(_Strict):
    schema_: Annotated[str, Field(alias="schema", pattern="^aisite.checkpoints/v1$")]
    checkpoints: Annotated[
        list[tuple[Annotated[str, Field(max_length=255)], Annotated[float, Field(ge=0, allow_inf_nan=False)]]],
        Field(max_length=MAX_LISTING),
    ]


def parse_listing(text: str, source: str) -> list[tuple[str, float]]:
    """checkpoints.py's result line as (name, modification time) pairs; PolicyInputError naming the source."""
    return [(n, m) for n, m in parse_result(_Listing, "aisite.checkpoints/v1", text, source).checkpoints]


@dataclass(frozen=True)
class Pod:
    name: str
    role: str
    version: str
    ready: bool
    terminating: bool
    proxy_config: str  # the proxy's configuration digest (its pods' annotation)


def _pod(o: _Object) -> Pod:
    labels, annotations = o.metadata.labels, o.metadata.annotations
    ready = o.status.phase == "Running" and o.condition("Ready") is not None
    return Pod(
        o.metadata.name,
        labels.get(ROLE_LABEL, ""),
        labels.get(VERSION_LABEL, ""),
        ready,
        o.metadata.deletionTimestamp is not None,
        annotations.get(PROXY_CONFIG, ""),
    )


# --------------------------------------------------------------------------------------------------- the runtime
def _path(api_version: str, kind: str, namespace: str, name: str = "") -> str:
    if kind not in PLURALS:
        raise ClusterError(f"{kind}: not a kind a promotion applies")
    group = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{group}/namespaces/{namespace}/{PLURALS[kind]}" + (f"/{name}" if name else "")


class KubeRuntime:
    """`aisite promote`'s runtime on a site (promote.Runtime): its cluster through the Kubernetes Python client."""

    def __init__(
        self,
        kubeconfig: Path,
        say: Say,
        *,
        timeout: float = 30,
        poll_s: float = 5.0,
        rollout_s: float = ROLLOUT_S,
        job_s: float = JOB_WAIT_S,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from kubernetes import config

        if not kubeconfig.is_file():
            raise ClusterError(f"no kubeconfig at {kubeconfig}: the cluster layer fetches it (aisite deploy)")
        self._api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), persist_config=False
        )
        self.say = say
        self.timeout, self.poll_s, self.rollout_s, self.job_s = timeout, poll_s, rollout_s, job_s
        self.sleep, self.clock = sleep, clock

    # ---------------------------------------------------------------------------------------- the API, bounded
    def _call(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        missing_ok: bool = False,
    ) -> bytes:
        """One request; its body read up to MAX_TEXT (ClusterError beyond, or for any refusal but a tolerated
        404)."""
        headers = {"Accept": "application/json, */*", "Content-Type": content_type}
        method_, url, headers_, body_, _ = self._api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            r = self._api.call_api(method_, url, header_params=headers_, body=body_, _request_timeout=self.timeout)
        except Exception as exc:  # the connection: refused, reset, timed out
            raise ClusterError(f"{method} {path}: {type(exc).__name__}: {str(exc)[:300]}") from None
        try:
            data: bytes = r.response.read(MAX_TEXT + 1)
        finally:
            r.response.release_conn()
        if missing_ok and r.status == 404:
            return b""
        if not 200 <= r.status <= 299:
            said = data[:2000].decode(errors="replace")
            try:  # the API server's Status says why; anything else is shown cut short
                doc = foreign.loads(said, MAX_TEXT)
                said = str(doc.get("message", said)) if isinstance(doc, dict) else said
            except foreign.ForeignJSONError:
                pass
            raise ClusterError(f"{method} {path}: {r.status} {' '.join(said.split())[:300]}")
        if len(data) > MAX_TEXT:
            raise ClusterError(f"{method} {path}: more than {MAX_TEXT} bytes came back")
        return data

    def _doc(self, method: str, path: str, **kw: Any) -> Any:
        data = self._call(method, path, **kw)
        try:
            return foreign.loads(data, MAX_TEXT) if data else None
        except foreign.ForeignJSONError as exc:
            raise ClusterError(f"{method} {path}: the answer: {exc}") from None

    def _pods(self, s: ServingPlan, selector: str) -> list[Pod]:
        doc = self._doc("GET", f"/api/v1/namespaces/{s.namespace}/pods", query={"labelSelector": selector})
        try:
            return [_pod(o) for o in _List.model_validate(doc).items]
        except ValidationError as exc:
            raise ClusterError(
                f"{s.namespace}: a pod list the API server sent is not one ({first_problem(exc)})"
            ) from None

    def _apply(self, o: dict[str, Any]) -> None:
        meta = o["metadata"]
        path = _path(o["apiVersion"], o["kind"], meta["namespace"], meta["name"])
        self._call(
            "PATCH",
            path,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            body=o,  # sent as JSON, which is YAML: the apply patch's content type
            content_type="application/apply-patch+yaml",
        )

    def _delete(self, o: dict[str, Any]) -> bool:
        meta = o["metadata"]
        path = _path(o["apiVersion"], o["kind"], meta["namespace"], meta["name"])
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        return bool(self._call("DELETE", path, body=body, missing_ok=True))

    # ----------------------------------------------------------------------------------------------- the jobs
    def _job(self, s: ServingPlan, job: dict[str, Any]) -> str:
        """Run `job` to its end; its pod's log (the last lines, bounded). The Job is deleted after, whatever
        happened; one of the same name left by a killed promote is deleted first."""
        name = job["metadata"]["name"]
        if self._delete(job):
            self._wait(f"{s.name}: the Job {name} left by an earlier run to go", lambda: self._gone(job))
        self._call("POST", _path("batch/v1", "Job", s.namespace), body=job)
        try:
            state = self._wait(f"{s.name}: the Job {name}", lambda: self._job_ended(job), limit=self.job_s)
            pods = self._pods(s, _selected({"batch.kubernetes.io/job-name": name}))
            if not pods:
                raise ClusterError(f"the Job {name} {state} and left no pod to read")
            log = self._call(
                "GET",
                f"/api/v1/namespaces/{s.namespace}/pods/{pods[0].name}/log",
                query={"container": PROMOTION_ROLE, "tailLines": "50", "limitBytes": str(MAX_TEXT)},
            ).decode(errors="replace")
            if state != "Complete":
                tail = log.strip().splitlines()[-1:] or ["(no output)"]
                raise ClusterError(f"the Job {name} {state}: {tail[0][:300]}")
            return log
        finally:
            self._delete(job)

    def _gone(self, o: dict[str, Any]) -> str | None:
        meta = o["metadata"]
        path = _path(o["apiVersion"], o["kind"], meta["namespace"], meta["name"])
        return None if self._call("GET", path, missing_ok=True) else "gone"

    def _job_ended(self, job: dict[str, Any]) -> str | None:
        meta = job["metadata"]
        doc = self._doc("GET", _path("batch/v1", "Job", meta["namespace"], meta["name"]))
        try:
            o = _Object.model_validate(doc)
        except ValidationError:
            raise ClusterError(f"the Job {meta['name']}: its status is not a Job's") from None
        if o.condition("Complete"):
            return "Complete"
        failed = o.condition("Failed")
        return f"failed ({failed.message[:200] or 'no reason given'})" if failed else None

    def _wait(self, what: str, done: Callable[[], str | None], *, limit: float | None = None) -> str:
        """Poll `done` until it says how it ended; a note each NOTE_S, ClusterError past `limit`."""
        limit = self.rollout_s if limit is None else limit
        start = last = self.clock()
        while (ended := done()) is None:
            if self.clock() - start > limit:
                raise ClusterError(f"{what}: not done within {limit:.0f} s")
            if self.clock() - last >= NOTE_S:
                self.say(f"{what}: waiting ({self.clock() - start:.0f} of {limit:.0f} s)")
                last = self.clock()
            self.sleep(self.poll_s)
        return ended

    def evaluate(self, plan: Plan, s: ServingPlan, artifact: str, dataset: str) -> str:
        self.say(f"{s.name}: evaluating {artifact} as a Job in {s.namespace}")
        return self._job(s, evaluation_job(plan, s, artifact, dataset))

    def checkpoints(self, plan: Plan, s: ServingPlan) -> list[tuple[str, float]]:
        log = self._job(s, listing_job(plan, s, f"models/{s.name}"))
        return parse_listing(log, f"{s.name}'s checkpoint listing")

    # ----------------------------------------------------------------------------------------- the rollout
    def apply(self, plan: Plan, s: ServingPlan) -> None:
        wanted = serving_objects(plan, s)
        for o in wanted:
            self._apply(o)
        proxy = next(o for o in wanted if o["kind"] == "Deployment" and o["metadata"]["name"] == f"{s.name}-proxy")
        template = proxy["spec"]["template"]["metadata"]["annotations"][PROXY_CONFIG]
        expect = {v.role: (v.version, v.replicas) for v in s.versions}
        expect["proxy"] = (template, int(proxy["spec"]["replicas"]))
        self._wait(f"{s.name}: the cluster serving {_shown(expect)}", lambda: self._served(s, expect))
        for o in retired_objects(plan, s):
            if self._delete(o):
                self.say(f"{s.name}: deleted {o['kind']} {o['metadata']['name']}")
        if gone := set(retired_roles(s)):
            self._wait(f"{s.name}: the {', '.join(sorted(gone))}'s pods to go", lambda: self._none_of(s, gone))

    def _served(self, s: ServingPlan, expect: dict[str, tuple[str, int]]) -> str | None:
        """'served' once each role has its replicas ready at its version (or configuration) and no other pod of it
        runs: a request then reaches what the plan says, and only that."""
        pods = [p for p in self._pods(s, _selected(selector(s))) if p.role != PROMOTION_ROLE]
        for role, (version, replicas) in expect.items():
            mine = [p for p in pods if p.role == role]
            current = [p for p in mine if (p.proxy_config if role == "proxy" else p.version) == version]
            if sum(p.ready and not p.terminating for p in current) < replicas or len(current) != len(mine):
                return None
        return "served"

    def _none_of(self, s: ServingPlan, roles: set[str]) -> str | None:
        pods = self._pods(s, _selected(selector(s)))
        return None if any(p.role in roles for p in pods) else "gone"

    # ----------------------------------------------------------------------------------------- live figures
    def metrics(self, plan: Plan, s: ServingPlan, role: str) -> dict[str, str]:
        version = next(v.version for v in s.versions if v.role == role)
        pods = self._pods(s, _selected(selector(s, role)))
        return {
            p.name: self._call(
                "GET", f"/api/v1/namespaces/{s.namespace}/pods/{p.name}:{SERVER_PORT}/proxy/metrics"
            ).decode(errors="replace")
            for p in pods
            if p.ready and not p.terminating and p.version == version
        }

    def traffic(self, plan: Plan, s: ServingPlan, seconds: float) -> dict[str, dict[str, Any]]:
        """The canary's seconds waited out (the site's users send its requests); per version, what its servers
        answered meanwhile, or why that could not be read."""
        before = {v.version: self._figures(plan, s, v) for v in s.versions}
        self.say(f"{s.name}: the site's requests reach the canary for {seconds} s")
        self.sleep(seconds)
        out: dict[str, dict[str, Any]] = {}
        for v in s.versions:
            after, start = self._figures(plan, s, v), before[v.version]
            try:
                if isinstance(start, str) or isinstance(after, str):
                    raise PolicyInputError(start if isinstance(start, str) else str(after))
                w = windows(start, after)
            except PolicyInputError as exc:
                out[v.version] = {"unread": str(exc)[:300]}
                continue
            p95 = None if w.p95_ms is None else round(w.p95_ms, 1)
            out[v.version] = {"requests": w.requests, "errors": w.errors, "p95_ms": p95}
        return out

    def _figures(self, plan: Plan, s: ServingPlan, v: ServedVersion) -> dict[str, ServerFigures] | str:
        """The version's servers' figures, or why they could not be read (the report's; the judgement reads the
        candidate's again itself)."""
        try:
            return parse_servers(self.metrics(plan, s, v.role), f"{s.name}'s {v.role}", v.version)
        except (PolicyInputError, ClusterError) as exc:
            return str(exc)


def _selected(labels: dict[str, str]) -> str:
    """A label selector's text: every label, equal."""
    return ",".join(f"{k}={v}" for k, v in labels.items())


def _shown(expect: dict[str, tuple[str, int]]) -> str:
    return ", ".join(
        f"{role} {'(its new configuration)' if role == 'proxy' else version} x{n}"
        for role, (version, n) in expect.items()
    )
