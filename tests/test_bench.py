"""Payloads run for real at tiny size on the CPU, and what reads their output: the collector, the judge, the plot.

nccl-tests and perftest cannot run here (no GPU, no RDMA): their parsers are held to the output format their
projects document, written out below; iperf3 and fio run for real on loopback and a temporary file.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aisite.bench.lab import data_problem
from aisite.bench.report import judge, plot
from aisite.bench.results import CollectError, Result, collect
from aisite.loader import load_site
from aisite.payloads import tools
from aisite.payloads.resnet import LAYERS, ResNet, sample_bytes, write_samples
from aisite.plan import build_plan
from tests.conftest import ROOT, run_cli

TINY = ["--batch-size", "2", "--image-size", "32", "--warmup", "1", "--steps", "2", "--threads", "1"]


def payload(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    cmd = [sys.executable, str(ROOT / "aisite" / "payloads" / args[0]), *args[1:]]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ | (env or {})
    )


def finish(p: subprocess.Popen[str]) -> str:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-2000:]
    return out


def listen_port() -> int:
    """A port free on loopback now, below the ephemeral range (32768 and up): a port from that range can be taken
    as a source port by another process's connection (the lab tests' SSH) before the test's server binds it."""
    for _ in range(50):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.fail("no free loopback port below the ephemeral range in 50 tries")


def test_own_resnets_have_torchvisions_parameter_counts() -> None:
    # torchvision's published sizes: ResNet-50 25,557,032 and ResNet-152 60,192,808 parameters.
    counts = {name: sum(p.numel() for p in ResNet(LAYERS[name]).parameters()) for name in LAYERS}
    assert counts == {"resnet50": 25_557_032, "resnet152": 60_192_808}


@pytest.mark.parametrize(("model", "mode"), [("resnet50", "train"), ("resnet152", "infer")])
def test_resnet_payload_prints_one_result_the_collector_reads(model: str, mode: str) -> None:
    out = finish(payload("resnet.py", "--workload", "w", "--model", model, "--mode", mode, *TINY))
    (r,) = collect(out)
    assert (r.kind, r.world_size, r.nodes, r.backend, r.device.type) == (f"{model}-{mode}", 1, 1, None, "cpu")
    assert r.value > 0 and r.per_process == [r.value] and r.unit == "images/s"
    assert r.params["batch_size"] == 2 and r.params["precision"] == "float32" and r.params["steps"] == 2
    assert r.tool["name"] == "torch" and r.seconds > 0


def test_resnet_payload_runs_ddp_across_processes_with_gloo() -> None:
    port = str(listen_port())
    base = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}
    procs = [
        payload("resnet.py", "--workload", "ddp", *TINY, env=base | {"RANK": str(i), "LOCAL_RANK": "0"})
        for i in range(2)
    ]
    outs = [finish(p) for p in procs]
    assert outs[1].strip() == "", "only rank 0 reports"
    (r,) = collect(outs[0])
    assert r.world_size == 2 and r.backend == "gloo" and len(r.per_process) == 2 and r.nodes == 2
    assert r.value == pytest.approx(sum(r.per_process), rel=1e-3)


def test_resnet_payload_reads_its_data_set_each_step_and_ranks_share_it(tmp_path: Path) -> None:
    """With --data each step reads a batch of the data set's files (warm-up steps too), rank r every world-th file
    from its r-th: the report gives each process's bytes, which the files' sizes account for exactly."""
    data = tmp_path / "set"
    assert write_samples(data, 6, 32) == 6 * sample_bytes(32)
    (r,) = collect(finish(payload("resnet.py", "--workload", "w", "--data", str(data), *TINY)))
    reads = 2 * (1 + 2)  # batch 2 on each of 1 warm-up and 2 timed steps
    assert r.params["data"]["dir"] == str(data) and r.params["data"]["files"] == 6
    assert r.params["data"]["bytes_read"] == [reads * sample_bytes(32)]
    port = str(listen_port())
    base = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}
    procs = [
        payload("resnet.py", "--workload", "ddp", "--data", str(data), *TINY, env=base | {"RANK": str(i)})
        for i in range(2)
    ]
    (r,) = collect(finish(procs[0]))
    finish(procs[1])
    assert r.params["data"]["bytes_read"] == [reads * sample_bytes(32)] * 2
    assert (r.params["data"]["files"], len(r.params["data"]["read_seconds"])) == (6, 2)


def test_resnet_payload_refuses_a_data_set_of_another_image_size(tmp_path: Path) -> None:
    write_samples(tmp_path / "set", 2, 64)
    p = payload("resnet.py", "--workload", "w", "--data", str(tmp_path / "set"), *TINY)
    out, err = p.communicate(timeout=300)
    assert p.returncode != 0 and out == ""
    assert f"{sample_bytes(64)} bytes, a 32-pixel sample has {sample_bytes(32)}" in err
    p = payload("resnet.py", "--workload", "w", "--data", str(tmp_path), *TINY)
    assert p.communicate(timeout=300)[1].strip().endswith(f"--data {tmp_path}: no *.sample file for rank 0 of 1")
    p = payload("resnet.py", "--workload", "w", "--data", str(tmp_path / "none"), *TINY)
    assert p.communicate(timeout=300)[1].strip().endswith(f"--data {tmp_path / 'none'}: No such file or directory")


def test_collector_refuses_a_line_that_breaks_the_schema() -> None:
    out = finish(payload("resnet.py", "--workload", "w", *TINY))
    broken = out.replace('"world_size": 1', '"world_size": 0')
    with pytest.raises(CollectError, match=r"job:2: not a valid aisite.bench/v1 result"):
        collect("log line\n" + broken, "job")
    assert collect("no result here\n{}\n") == []
    # What a node could print to write elsewhere or poison the report: a path as the workload, an infinite figure.
    good = json.loads(out.strip().splitlines()[-1])
    for field, lie in (
        ("workload", "../../../etc/cron.d/x"),
        ("workload", "/etc/x"),
        ("value", 1e400),
        ("host", "h" * 300),
    ):
        line = json.dumps(good | {field: lie}).replace("Infinity", "1e400")
        with pytest.raises(CollectError):
            collect(line)


def _iperf3_server() -> tuple[subprocess.Popen[bytes], str]:
    """An iperf3 server on loopback, listening. Its port is below the ephemeral range: a port picked there can be
    taken as a source port by another process (the lab tests' SSH) before iperf3 binds it, and the server exits."""
    for _ in range(10):
        port = str(listen_port())
        # Not one-off (-1): an attempt made while it starts would use up a one-off server; it is stopped below.
        server = subprocess.Popen(["iperf3", "-s", "-B", "127.0.0.1", "-p", port], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while server.poll() is None and time.monotonic() < deadline:
            listening = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=False)
            if listening.stdout.strip():
                return server, port
            time.sleep(0.1)
        server.kill()
        server.wait()
    pytest.fail("no iperf3 server could listen on loopback in 10 tries")


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 is not installed (scripts/setup.sh installs it)")
def test_iperf3_output_from_a_real_run_on_loopback() -> None:
    server, port = _iperf3_server()
    try:
        r = subprocess.run(
            ["iperf3", "-J", "-c", "127.0.0.1", "-p", port, "-t", "1", "-P", "2"],
            capture_output=True,
            text=True,
            check=False,
        )
        doc = tools.to_result("iperf3", "loop", r.stdout)
    finally:
        server.kill()
        server.wait()
    res = Result.model_validate(doc)
    assert res.unit == "Gb/s" and res.value > 0 and len(res.per_process) == 2 and res.params["streams"] == 2


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (scripts/setup.sh installs it)")
def test_fio_wrapper_runs_fio_and_reports_its_bandwidth(tmp_path: Path) -> None:
    job = ["fio", "--output-format=json", "--name=t", f"--directory={tmp_path}", "--rw=write", "--bs=64k", "--size=4m"]
    out = finish(payload("tools.py", "fio", "--workload", "fio-tmp", "--", *job))
    (r,) = collect(out)
    assert r.kind == "fio" and r.unit == "MiB/s" and r.value > 0 and r.params["jobs"] == 1 and r.tool["name"] == "fio"


def test_a_failing_tool_reports_no_result() -> None:
    p = payload("tools.py", "iperf3", "--workload", "x", "--", sys.executable, "-c", "import sys; sys.exit(4)")
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 4 and out == ""


NCCL = """#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    310.5    3.38    6.33      0    308.1    3.40    6.38      0
  8589934592    2147483648     float     sum      -1   1432.0   59.98  112.46      0   1430.9   60.03  112.56      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 59.395
"""
IB = """ #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      5000             92.41              92.37              0.176182
"""


def test_nccl_and_perftest_parsers_read_their_documented_tables() -> None:
    nccl = tools.nccl(NCCL)
    assert nccl["value"] == 112.46 and nccl["unit"] == "GB/s" and nccl["params"]["avg_busbw_gb_s"] == 59.395
    ib = tools.ib_write_bw(IB)
    assert ib["value"] == 92.37 and ib["unit"] == "Gb/s" and ib["params"]["peak"] == 92.41
    with pytest.raises(tools.NoFigureError):
        tools.nccl("# no rows\n")
    with pytest.raises(tools.NoFigureError):
        tools.tf_cnn("images/sec: 12 (jitter)\n")
    assert tools.tf_cnn("...\ntotal images/sec: 17250.31\n")["value"] == 17250.31


def _result(**over: object) -> Result:
    doc = tools.result(workload="x", kind="resnet50-train", metric="images_per_second", unit="images/s", value=1.0)
    return Result.model_validate(doc | over)


def test_report_judges_gpu_runs_against_the_reference_and_cpu_runs_not(tmp_path: Path) -> None:
    dc1 = build_plan(load_site("dc1"))  # resnet50-dgx2: 90 % of the V100 reference, 90 % scaling
    gpu = {"type": "cuda", "name": "Tesla V100-SXM3-32GB", "count": 1}
    one = _result(workload="resnet50-dgx2", value=1250.0, device=gpu, started="2026-01-01T00:00:00+00:00")
    many = _result(
        workload="resnet50-dgx2",
        value=16 * 1100.0,
        world_size=16,
        per_process=[1100.0] * 16,
        device=gpu | {"count": 16},
    )
    rows = {r.processes: r for r in judge(dc1, [one, many])}
    assert rows[1].reference == 1300.0 and rows[1].ratio == pytest.approx(1250 / 1300) and rows[1].verdict == "pass"
    assert rows[16].reference == 16 * 1300.0 and rows[16].scaling_efficiency == pytest.approx(1100 / 1250)
    assert rows[16].verdict == "fail" and any("scaling efficiency 88.0% < 90%" in r for r in rows[16].reasons)
    lab = build_plan(load_site("lab"))
    cpu = [_result(workload="resnet50-train", value=20.0), _result(workload="resnet50-train", value=30.0, world_size=2)]
    rows = {r.processes: r for r in judge(lab, cpu)}
    assert rows[2].reference is None and "not compared with a GPU reference" in rows[2].reference_source
    assert rows[2].scaling_efficiency == pytest.approx(0.75) and rows[2].verdict == "not judged"
    png = plot(judge(lab, cpu), tmp_path / "r.png", "lab")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_a_result_is_saved_as_one_file_of_the_results_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A workload's name, or a measurement's such as acceptance's `unit0/rail1`, becomes one file name there, even
    one that tries to climb out (`a/../../x`)."""
    from aisite.bench import results

    out = finish(payload("resnet.py", "--workload", "w", *TINY))
    (r,) = collect(out)
    monkeypatch.setattr(results, "results_dir", lambda site: tmp_path / "results")
    for name in ("unit0/rail1", "a/../../x"):
        path = results.save("lab", r.model_copy(update={"workload": name}))
        assert path.parent == tmp_path / "results" and "/" not in path.name and ".." not in path.name


def test_a_lab_bench_reads_data_only_under_the_gpu_nodes_ceph_mounts() -> None:
    """`bench run --data` takes a plain path under one of the GPU nodes' data-set mounts, and says why not
    otherwise (exit 2, before it touches the lab)."""
    lab = build_plan(load_site("lab"))
    assert lab.ceph is not None and lab.ceph.gpu_client is not None
    (_, mount), *_ = lab.ceph.gpu_client.mounts
    assert data_problem(lab, f"{mount}/imagenet-shards") is None
    for bad, why in [
        (mount, "under none of"),
        ("/etc/shadow", "under none of"),
        (f"{mount}/../../etc", "not a plain absolute path"),
        (f"{mount}/a b", "not a plain absolute path"),
        (f"{mount}/x/", "not a plain absolute path"),
        ("relative/x", "not a plain absolute path"),
    ]:
        assert why in (data_problem(lab, bad) or ""), bad
    r = run_cli("bench", "run", "lab", "resnet50-train", "--data", "/etc")
    assert r.returncode == 2 and r.stderr.startswith("--data: /etc is under none of the GPU nodes' data-set mounts")
    no_ceph = build_plan(load_site("dc1"))
    assert "mount no Ceph data set" in (data_problem(no_ceph, "/mnt/ceph/x") or "")
