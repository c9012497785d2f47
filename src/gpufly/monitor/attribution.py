"""Which scheduler job a GPU process belongs to: a Slurm job, or a Kubernetes pod, read from /proc.

Opt-in (``gpufly serve --attribute slurm,k8s``): reading other users' environments needs root (or the same
user), and a job's names are more than a monitor shows by default. Each source and what it gives:

- **Slurm, environment** (``/proc/PID/environ``, NUL-separated, proc(5)): ``SLURM_JOB_ID``, and
  ``SLURM_JOB_USER``, ``SLURM_JOB_NAME``, ``SLURM_JOB_PARTITION`` where set; slurmd sets them for every task
  (https://slurm.schedmd.com/srun.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES). Readable by root or the
  process's own user only.
- **Slurm, cgroup** (``/proc/PID/cgroup``, readable by anyone): the job id alone, from the path
  slurmstepd creates, ``.../job_12345/step_0/...`` under cgroup v1 (``/slurm/uid_1000/job_12345``) and v2
  (``/system.slice/slurmstepd.scope/job_12345``) (https://slurm.schedmd.com/cgroup_v2.html); used when the
  environment cannot be read.
- **Kubernetes, cgroup**: the pod UID and the container id. The kubelet puts each pod in
  ``kubepods[/QOS]/pod<UID>/<container>`` with the cgroupfs driver and in
  ``kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<UID with _ for ->.slice/<runtime>-<id>.scope``
  with the systemd driver, under cgroup v1 and v2 alike
  (https://kubernetes.io/docs/concepts/architecture/cgroups/,
  https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/configure-cgroup-driver/).
- **Kubernetes, container runtime**: the pod's name and namespace and the container's name, from the OCI
  runtime spec the runtime keeps for each container (``config.json``), whose annotations the kubelet's CRI
  request fills: containerd's ``io.kubernetes.cri.sandbox-name``/``-namespace`` and
  ``io.kubernetes.cri.container-name`` under ``/run/containerd/io.containerd.runtime.v2.task/k8s.io/ID/``
  (https://github.com/containerd/containerd/blob/main/internal/cri/annotations/annotations.go), CRI-O's
  ``io.kubernetes.pod.name``/``.namespace`` and ``io.kubernetes.container.name`` under
  ``/run/containers/storage/overlay-containers/ID/userdata/``. Readable by root on the host, or in a pod
  that mounts those folders (deploy/kubernetes does).
- **Kubernetes, environment**: the pod's name and namespace where the pod spec passes them through the
  downward API as ``POD_NAME`` and ``POD_NAMESPACE`` (and ``CONTAINER_NAME``, which a spec sets by hand:
  the downward API has no field for it) (https://kubernetes.io/docs/concepts/workloads/pods/downward-api/);
  used where the runtime's state is not readable (Docker, or not mounted). Without either, the pod is named
  by its UID; ``kubectl get pods -A -o custom-columns=UID:.metadata.uid,NAME:.metadata.name`` maps it back.

A process in both (a Slurm job inside a pod) is counted in its Slurm job, the finer unit of work. Only
these variables are kept from an environment: the rest (tokens, paths) is never stored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from gpufly.errors import GpuflyError, unknown_choice

SOURCES: tuple[str, ...] = ("slurm", "k8s")
"""What ``--attribute`` accepts."""

_ALIASES = {"kubernetes": "k8s"}

_KEPT = ("SLURM_JOB_ID", "SLURM_JOB_USER", "SLURM_JOB_NAME", "SLURM_JOB_PARTITION",
         "POD_NAME", "POD_NAMESPACE", "CONTAINER_NAME")

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_POD = re.compile(rf"pod({_UID})")
_CONTAINER = re.compile(r"(?:^|/)(?:[a-z-]+-)?([0-9a-f]{64})(?:\.scope)?$")
_SLURM_JOB = re.compile(r"/job_(\d+)(?:/|$)")

RUNTIME_SPECS: tuple[tuple[str, tuple[str, str, str]], ...] = (
    ("run/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/config.json",
     ("io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.sandbox-namespace", "io.kubernetes.cri.container-name")),
    ("run/containers/storage/overlay-containers/{id}/userdata/config.json",
     ("io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.container.name")),
)
"""Where containerd and CRI-O keep a container's OCI spec (under the host's root), and the annotations in it
that name the pod, its namespace and the container."""


@dataclass(frozen=True)
class JobRef:
    """The job one process belongs to; ``key`` names the job and is the same for all its processes."""

    scheduler: str
    """``slurm`` or ``k8s``."""
    key: str
    """The Slurm job id, or the pod UID: stable for the job's life, unlike a pod name that may be unknown."""
    user: str = ""
    name: str = ""
    """The Slurm job name, or the pod name where the downward API gives it."""
    partition: str = ""
    namespace: str = ""
    container: str = ""
    """The container name where set, else the short (12 hex digit) container id."""


def parse_sources(text: str) -> frozenset[str]:
    """``"slurm,k8s"`` into the set of sources; a GpuflyError with "did you mean" for an unknown one."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    if not names:
        raise GpuflyError("--attribute needs at least one source", hint=f"one or more of: {', '.join(SOURCES)}")
    for name in names:
        if name not in SOURCES and name not in _ALIASES:
            raise unknown_choice("attribution source", name, (*SOURCES, *_ALIASES),
                                 hint=f"--attribute takes a comma-separated list of: {', '.join(SOURCES)}")
    return frozenset(_ALIASES.get(name, name) for name in names)


def sources_for(attribute: str | None, replaying: bool) -> frozenset[str]:
    """The sources ``--attribute`` asks for (none when not given); refused with ``--replay``, whose jobs are the
    recording's (as recorded)."""
    if attribute is None:
        return frozenset()
    sources = parse_sources(attribute)
    if replaying:
        raise GpuflyError("--attribute reads this machine's processes; it does nothing with --replay",
                          hint="a recording holds the jobs it was made with, as recorded: drop --attribute")
    return sources


def read_environ(pid: int, proc_root: Path = Path("/proc")) -> dict[str, str] | None:
    """The attribution variables of a process's environment (NUL-separated ``KEY=value``); None if unreadable.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp()); (root / "7").mkdir()
    >>> _ = (root / "7" / "environ").write_bytes(b"HOME=/root\\0SLURM_JOB_ID=42\\0TOKEN=secret\\0")
    >>> read_environ(7, root)
    {'SLURM_JOB_ID': '42'}
    """
    try:
        data = (proc_root / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    kept = {}
    for entry in data.split(b"\0"):
        key, equals, value = entry.partition(b"=")
        name = key.decode(errors="replace")
        if equals and name in _KEPT:
            kept[name] = value.decode(errors="replace")
    return kept


def read_cgroup_paths(pid: int, proc_root: Path = Path("/proc")) -> list[str]:
    """The cgroup paths of a process (the third field of each ``hierarchy:controllers:path`` line)."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text(errors="replace")
    except OSError:
        return []
    return [line.split(":", 2)[2] for line in text.splitlines() if line.count(":") >= 2]


def slurm_job(environ: dict[str, str] | None, cgroups: list[str]) -> JobRef | None:
    """The Slurm job from the environment (id, user, name, partition), else its id from the cgroup path."""
    if environ and environ.get("SLURM_JOB_ID"):
        return JobRef("slurm", environ["SLURM_JOB_ID"], user=environ.get("SLURM_JOB_USER", ""),
                      name=environ.get("SLURM_JOB_NAME", ""), partition=environ.get("SLURM_JOB_PARTITION", ""))
    for path in cgroups:
        match = _SLURM_JOB.search(path)
        if match:
            return JobRef("slurm", match.group(1))
    return None


def runtime_names(container_id: str, host_root: Path = Path("/")) -> tuple[str, str, str] | None:
    """(pod, namespace, container) from the runtime's spec of the container; None where none is readable."""
    for template, keys in RUNTIME_SPECS:
        try:
            spec = json.loads((host_root / template.format(id=container_id)).read_bytes())
        except (OSError, ValueError):
            continue
        annotations = spec.get("annotations") if isinstance(spec, dict) else None
        if isinstance(annotations, dict) and keys[0] in annotations:
            pod, namespace, container = (str(annotations.get(key, "")) for key in keys)
            return pod, namespace, container
    return None


def k8s_pod(environ: dict[str, str] | None, cgroups: list[str], host_root: Path = Path("/")) -> JobRef | None:
    """The pod from the cgroup path (UID, container id), named from the runtime's spec, else the downward API.

    >>> k8s_pod(None, ["/kubepods/burstable/pod0f9e4f6c-1b2a-4c3d-8e7f-0123456789ab/" + "ab" * 32])
    JobRef(scheduler='k8s', key='0f9e4f6c-1b2a-4c3d-8e7f-0123456789ab', user='', name='', partition='', \
namespace='', container='abababababab')
    """
    for path in cgroups:
        pod = _POD.search(path)
        if pod is None:
            continue
        uid = pod.group(1).replace("_", "-")
        container = _CONTAINER.search(path)
        named = runtime_names(container.group(1), host_root) if container else None
        if named is not None:
            return JobRef("k8s", uid, name=named[0], namespace=named[1], container=named[2])
        environ = environ or {}
        return JobRef("k8s", uid, name=environ.get("POD_NAME", ""), namespace=environ.get("POD_NAMESPACE", ""),
                      container=environ.get("CONTAINER_NAME") or (container.group(1)[:12] if container else ""))
    return None


@dataclass(frozen=True)
class Attributor:
    """Finds each process's job from the sources asked for; ``host_root`` is where the host's /run is seen."""

    sources: frozenset[str]
    proc_root: Path = Path("/proc")
    host_root: Path = Path("/")

    def job_of(self, pid: int) -> JobRef | None:
        """The job a process belongs to; Slurm first (see the module's note)."""
        if not self.sources:
            return None
        environ = read_environ(pid, self.proc_root)
        cgroups = read_cgroup_paths(pid, self.proc_root)
        if "slurm" in self.sources:
            job = slurm_job(environ, cgroups)
            if job is not None:
                return job
        if "k8s" in self.sources:
            return k8s_pod(environ, cgroups, self.host_root)
        return None
