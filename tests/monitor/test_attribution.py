"""Which Slurm job or Kubernetes pod a GPU process belongs to, read from a fake /proc tree.

The tree (tests/fixtures/monitor/proc, its README lists each process) holds environ files with NUL
separators and cgroup files for cgroup v1 and v2 under both kubelet cgroup drivers (cgroupfs, systemd).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufly.errors import GpuflyError
from gpufly.hw import ProcessSample
from gpufly.hw.fake_nvml import FakePynvml
from gpufly.monitor.attribution import Attributor, JobRef, parse_sources, read_environ
from gpufly.monitor.backends.live import LiveBackend, ProcessJoiner
from gpufly.monitor.sample import JobSample, Snapshot
from tests.fakes.nvml import fake_nvml

PROC = Path(__file__).parent.parent / "fixtures" / "monitor" / "proc"
HOST = PROC.parent / "host"
BOTH = frozenset({"slurm", "k8s"})


def job_of(pid: int, sources: frozenset[str]) -> JobRef | None:
    return Attributor(sources, PROC, HOST).job_of(pid)


class Psutil:
    """psutil's view of the fake processes: each is python, run by root."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def create_time(self) -> float:
        return self.pid * 10.0

    def name(self) -> str:
        return "python"

    def cmdline(self) -> list[str]:
        return ["python", "train.py"]

    def username(self) -> str:
        return "root"


def joiner(attribute: frozenset[str] = BOTH) -> ProcessJoiner:
    return ProcessJoiner(PROC, open_process=Psutil, clock=lambda: 0.0, procfs=True,
                         attribute=Attributor(attribute, PROC, HOST))


def test_a_slurm_job_is_named_from_the_environment_and_nothing_else_is_kept() -> None:
    assert read_environ(101, PROC) == {"SLURM_JOB_ID": "4242", "SLURM_JOB_USER": "alice",
                                       "SLURM_JOB_NAME": "llama-sft", "SLURM_JOB_PARTITION": "gpu"}
    assert job_of(101, BOTH) == JobRef("slurm", "4242", user="alice", name="llama-sft", partition="gpu")


def test_an_unreadable_environment_still_gives_the_slurm_job_id_from_the_cgroup_v1_path() -> None:
    assert read_environ(102, PROC) is None
    assert job_of(102, frozenset({"slurm"})) == JobRef("slurm", "4243")


@pytest.mark.parametrize(("pid", "expected"), [
    (201, JobRef("k8s", "0f9e4f6c-1b2a-4c3d-8e7f-0123456789ab", name="trainer-0", namespace="ml",
                 container="trainer")),
    (202, JobRef("k8s", "7c1d2e3f-4a5b-4c6d-8e9f-a0b1c2d3e4f5", name="bert-finetune-x7k2p", namespace="research",
                 container="train")),
    (203, JobRef("k8s", "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9", name="infer-7d9f", namespace="serving",
                 container="0b" * 6)),
    (204, JobRef("k8s", "2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d", container="d4" * 6)),
    (205, JobRef("k8s", "9a8b7c6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d", name="vllm-0", namespace="inference",
                 container="server")),
], ids=["v2-systemd-downward-api", "v1-cgroupfs-containerd-spec", "v2-cgroupfs-downward-api",
        "v1-systemd-docker-uid-only", "v2-cgroupns-relative-crio-spec"])
def test_a_pod_is_found_by_uid_under_every_cgroup_version_and_driver_and_named_where_a_source_says(
        pid: int, expected: JobRef) -> None:
    assert job_of(pid, frozenset({"k8s"})) == expected


def test_a_process_outside_any_job_has_none_and_a_stray_pod_name_is_not_a_pod() -> None:
    assert job_of(301, BOTH) is None


def test_slurm_inside_a_pod_counts_as_the_slurm_job_and_each_source_is_opt_in() -> None:
    assert job_of(401, BOTH) == JobRef("slurm", "5000", user="carol")
    assert job_of(401, frozenset({"k8s"})).name == "slurmd-3"  # type: ignore[union-attr]
    assert job_of(101, frozenset({"k8s"})) is None
    assert job_of(201, frozenset()) is None


def test_the_join_groups_processes_by_job_across_gpus() -> None:
    listed = [ProcessSample(pid, gpu, "compute") for pid, gpu in ((101, 0), (101, 1), (201, 1), (301, 1), (999, 0))]
    join = joiner()
    running = join.join(listed)
    assert [p.pid for p in running] == [101, 101, 201, 301], "999 is not in the tree: gone"
    assert join.jobs(running) == [
        JobSample("slurm", "4242", user="alice", name="llama-sft", partition="gpu", pids=[101]),
        JobSample("k8s", "0f9e4f6c-1b2a-4c3d-8e7f-0123456789ab", name="trainer-0", namespace="ml",
                  container="trainer", pids=[201]),
    ]


def test_without_attribution_a_process_in_a_job_has_none() -> None:
    join = joiner(attribute=frozenset())
    assert join.jobs(join.join([ProcessSample(101, 0, "compute"), ProcessSample(201, 0, "compute")])) == []


def test_the_live_snapshot_lists_the_jobs_and_a_recording_keeps_them() -> None:
    fake: FakePynvml = fake_nvml("monitor/nvml_live.json")
    fake.set_processes(0, [{"pid": 101, "used_memory": 2**30}, {"pid": 203, "used_memory": 2**29}])
    backend = LiveBackend(fake, hostname="node-1", joiner=joiner())
    snapshot = backend.snapshot()
    assert [(job.scheduler, job.key, job.pids) for job in snapshot.jobs] == [
        ("slurm", "4242", [101]), ("k8s", "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9", [203])]
    assert Snapshot.from_dict(snapshot.to_dict()).jobs == snapshot.jobs
    fake.set_processes(0, [{"pid": 203, "used_memory": 2**29}])
    assert [job.key for job in backend.snapshot().jobs] == ["5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9"], (
        "the Slurm job's last process is gone: so is the job")


def test_a_recording_from_before_jobs_reads_with_none() -> None:
    assert Snapshot.from_dict({"time": 1.0, "hostname": "old"}).jobs == []


@pytest.mark.parametrize(("text", "expected"), [("slurm", {"slurm"}), ("k8s, slurm", {"slurm", "k8s"}),
                                                ("Kubernetes", {"k8s"})])
def test_sources_parse(text: str, expected: set[str]) -> None:
    assert parse_sources(text) == expected


def test_an_unknown_source_says_what_it_may_have_meant() -> None:
    with pytest.raises(GpuflyError) as caught:
        parse_sources("k8s,slrum")
    assert caught.value.message == "unknown attribution source 'slrum'; did you mean slurm?"


def test_the_runtime_spec_names_the_pod_before_the_environment_does(tmp_path: Path) -> None:
    host = tmp_path / "host"
    spec = host / "run/containerd/io.containerd.runtime.v2.task/k8s.io" / ("3f" * 32) / "config.json"
    spec.parent.mkdir(parents=True)
    spec.write_text('{"annotations": {"io.kubernetes.cri.sandbox-name": "trainer-0-real", '
                    '"io.kubernetes.cri.sandbox-namespace": "ml", "io.kubernetes.cri.container-name": "main"}}')
    job = Attributor(frozenset({"k8s"}), PROC, host).job_of(201)
    assert job is not None and (job.name, job.container) == ("trainer-0-real", "main")
    spec.write_text("{not json")
    job = Attributor(frozenset({"k8s"}), PROC, host).job_of(201)
    assert job is not None and job.name == "trainer-0", "an unreadable spec falls back to the downward API"
