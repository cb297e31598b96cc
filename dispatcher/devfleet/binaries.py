"""Build and cache the dev fleet's binaries.

kube-apiserver, kubectl, kube-scheduler and kube-controller-manager come from the pinned
wrapper module ``deploy/local/kube-apiserver`` (k8s.io/kubernetes), etcd from
``deploy/local/etcd`` and kwok (simulated kubelets of the real members) from
``deploy/local/kwok``. They are built with the local Go toolchain through the Go module proxy
and cached outside the repository, under a key derived from the wrapper modules'
``go.mod``/``go.sum`` and the Go version, so a pin change rebuilds and a warm machine skips
the work entirely. A light fleet (light members and a dedicated hub) needs etcd,
kube-apiserver, kubectl and kube-controller-manager (the dedicated hub's controllers):
``ensure_binaries(members=False)`` builds just those.

The workload operators of the real members (JobSet, LeaderWorkerSet, ...) are a separate
build list, ``OPERATORS``: one wrapper module each under ``deploy/local/<name>/``, built by
``ensure_operators()`` (which ``ensure_binaries(members=True)`` calls) into their own cache
directory together with the CRD YAMLs of the same module version, so starting a fleet never
needs the Go module cache. An operator whose wrapper module is absent is skipped.

``helm`` (the chart's lint and render tests, ``deploy/chart``) comes from the pinned wrapper
module ``deploy/local/helm`` (helm.sh/helm/v3), built by ``ensure_helm()`` into its own cache
directory (a Kubernetes pin change does not rebuild it), with the version and default
Kubernetes version ldflags of helm's own Makefile; ``python -m dispatcher.devfleet.binaries``
builds it too.

Peers (``PEERS``: Kueue, for ``dispatcher dev up --with-kueue`` and ``benchmarks/peers.py``)
are built the same way by ``ensure_peers()``, but only when asked for: not by
``ensure_binaries()`` nor by ``python -m dispatcher.devfleet.binaries`` (what CI runs), since
the dispatcher's own tests do not need them and each costs minutes of CI.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from dispatcher.devfleet.operatorbuilds import OPERATORS, PEERS, OperatorBuild
from dispatcher.sources import SourceMissing, source_path

__all__ = ["KUBERNETES_MODULES", "OPERATORS", "PEERS", "Binaries", "BuildError",
           "OperatorBinary", "OperatorBuild", "cache_root", "ensure_binaries", "ensure_helm",
           "ensure_operators", "ensure_peers", "kwok_stages", "minor_of", "wrapper_dir"]

KUBERNETES_MODULES: Mapping[str, str] = {"1.35": "kube-apiserver", "1.37": "kubernetes-v1.37"}
"""The Kubernetes minors a dev cluster can run, each from its wrapper module under
``deploy/local``; the first is the default (and builds etcd and kwok beside it)."""


class BuildError(RuntimeError):
    """A control-plane binary could not be built; the message names the module and command."""


@dataclass(frozen=True, kw_only=True)
class OperatorBinary:
    """A built operator: binary, version and the directory of its CRD YAMLs."""

    name: str
    binary: Path
    version: str
    crds_dir: Path
    minors: tuple[str, ...] = ()
    """The Kubernetes minors whose clusters run it (empty: every minor)."""

    def runs_on(self, minor: str) -> bool:
        """Whether a cluster of Kubernetes ``minor`` runs this build."""
        return not self.minors or minor in self.minors

    def crd_files(self) -> list[Path]:
        """The CRD YAMLs copied from the module."""
        return sorted(self.crds_dir.glob("*.yaml"))

    @property
    def files_dir(self) -> Path:
        """Where the build's other release manifests (``OperatorBuild.files``) are."""
        return self.crds_dir.parent / "files"


@dataclass(frozen=True, kw_only=True)
class Binaries:
    """Paths of the built binaries (the member ones exist after ``ensure_binaries()``)."""

    kube_apiserver: Path
    kubectl: Path
    etcd: Path
    kube_scheduler: Path
    kube_controller_manager: Path
    kwok: Path
    kubernetes_version: str
    etcd_version: str
    kwok_version: str
    operators: tuple[OperatorBinary, ...] = ()
    """The workload operators of the real members (empty for a light fleet)."""
    minors: Mapping[str, Binaries] = field(default_factory=dict)
    """Every built minor ("1.37") to its binaries: its own Kubernetes four, the same etcd,
    kwok and operators."""

    @property
    def minor(self) -> str:
        """This set's Kubernetes minor ("1.35")."""
        return minor_of(self.kubernetes_version)

    def at(self, minor: str | None) -> Binaries:
        """The binaries of a cluster running Kubernetes ``minor`` (None: this set)."""
        if minor is None or minor == self.minor:
            return self
        found = self.minors.get(minor)
        if found is None:
            raise BuildError(f"Kubernetes {minor} is not built here; the dev fleet runs "
                             f"{', '.join(KUBERNETES_MODULES)}")
        return replace(found, operators=self.operators, minors=self.minors)

    def operator(self, name: str) -> OperatorBinary | None:
        """The built operator called ``name``, or None."""
        return next((op for op in self.operators if op.name == name), None)

    def missing(self) -> list[Path]:
        """The binaries not built (yet)."""
        return [path for path in (self.kube_apiserver, self.kubectl, self.etcd,
                                  self.kube_scheduler, self.kube_controller_manager, self.kwok)
                if not path.exists()]


def wrapper_dir() -> Path:
    """Where the Go wrapper modules live (``deploy/local`` of the source tree).

    ``DISPATCHER_GO_MODULES`` overrides it, for an installed package used from another tree.
    """
    override = os.environ.get("DISPATCHER_GO_MODULES")
    if override:
        return Path(override)
    try:
        return source_path("deploy", "local")
    except SourceMissing as exc:
        raise BuildError(str(exc)) from None


def cache_root() -> Path:
    """Cache directory for built binaries (``DISPATCHER_CACHE`` or ``~/.cache/dispatcher``)."""
    override = os.environ.get("DISPATCHER_CACHE")
    base = Path(override) if override else Path.home() / ".cache" / "dispatcher"
    return base / "bin"


def _required_version(go_mod: Path, module: str) -> str:
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod.read_text(), re.M)
    if not match:
        raise BuildError(f"{go_mod}: no 'require {module} vX.Y.Z' line")
    return match.group(1)


def _go_version() -> str:
    try:
        out = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"the Go toolchain is needed to build the control planes: {exc}") from exc
    return out.stdout.strip()


def _key(*modules: Path) -> str:
    digest = hashlib.sha256(_go_version().encode())
    for module in modules:
        for name in ("go.mod", "go.sum"):
            digest.update((module / name).read_bytes())
        for source in sorted(module.rglob("*.go")):  # a wrapper's own (patched) packages
            digest.update(str(source.relative_to(module)).encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()[:12]


def _go_build(*, module: Path, package: str, output: Path, ldflags: str, log: Path) -> None:
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    cmd = ["go", "build", "-trimpath", "-pgo=off", "-tags=grpcnotrace",
           "-ldflags", ldflags, "-o", str(output), package]
    started = time.monotonic()
    _say(f"building {package} (in {module.name}); first build takes several minutes, log: {log}")
    with log.open("a") as sink:
        proc = subprocess.Popen(cmd, cwd=module, env=env, stdout=sink, stderr=subprocess.STDOUT)
        while True:
            try:
                proc.wait(timeout=15)
                break
            except subprocess.TimeoutExpired:
                _say(f"  ... {package}: {time.monotonic() - started:.0f}s")
    elapsed = time.monotonic() - started
    with log.open("a") as sink:  # the build time stays on record beside the binary
        sink.write(f"go build {package}: exit {proc.returncode} after {elapsed:.0f}s\n")
    if proc.returncode != 0:
        tail = log.read_text()[-3000:]
        raise BuildError(f"go build {package} in {module} failed (exit {proc.returncode}):\n{tail}")
    _say(f"built {output.name} in {elapsed:.0f}s")


def _say(message: str) -> None:
    print(f"[dispatcher dev build] {message}", file=sys.stderr, flush=True)


def _k8s_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    parts = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        parts += [f"-X {pkg}.gitVersion={version}", f"-X {pkg}.gitMajor={major}",
                  f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean"]
    return " ".join(parts)


def kwok_stages() -> Path:
    """The kwok stage file of the real members (``deploy/local/kwok/stages/stages.yaml``)."""
    return wrapper_dir() / "kwok" / "stages" / "stages.yaml"


def _module_dir(module_dir: Path, module: str) -> Path:
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    try:
        out = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", module], cwd=module_dir,
                             env=env, capture_output=True, text=True, check=True)
    except subprocess.CalledProcessError as exc:
        raise BuildError(f"go list -m {module} in {module_dir} failed: {exc.stderr}") from exc
    return Path(out.stdout.strip())


def _manifest(module_dir: Path, source: Path, rel: str) -> Path:
    """The file ``rel`` of the operator's module (``source``), or ``module:path`` of another
    module of the wrapper's build."""
    module, sep, path = rel.rpartition(":")
    return _module_dir(module_dir, module) / path if sep else source / rel


def ensure_operators(*, rebuild: bool = False, names: Collection[str] | None = None,
                     builds: tuple[OperatorBuild, ...] = OPERATORS
                     ) -> tuple[OperatorBinary, ...]:
    """Build (or find cached) the operators of ``builds`` that have a wrapper module
    (only those in ``names`` when given), one at a time, with their CRD YAMLs."""
    root = wrapper_dir()
    built: list[OperatorBinary] = []
    for spec in builds:
        module_dir = root / spec.directory
        if (names is not None and spec.name not in names) or not (module_dir / "go.mod").exists():
            continue
        version = _required_version(module_dir / "go.mod", spec.module)
        target = cache_root() / f"op-{spec.name}-{version}-{_key(module_dir)}"
        op = OperatorBinary(name=spec.name, binary=target / spec.name, version=version,
                            crds_dir=target / "crds", minors=spec.minors)
        if rebuild and target.exists():
            shutil.rmtree(target)
        if not op.binary.exists():
            target.mkdir(parents=True, exist_ok=True)
            partial = op.binary.with_suffix(".partial")
            _go_build(module=module_dir, package=spec.package, output=partial, ldflags="-s -w",
                      log=target / "build.log")
            source = _module_dir(module_dir, spec.module)
            crds = target / "crds.partial"
            shutil.rmtree(crds, ignore_errors=True)
            crds.mkdir()
            for rel in spec.crds:
                shutil.copyfile(_manifest(module_dir, source, rel), crds / Path(rel).name)
            if spec.webhooks:
                shutil.copyfile(source / spec.webhooks, target / "webhooks.yaml")
            if spec.files:
                shutil.rmtree(op.files_dir, ignore_errors=True)
                op.files_dir.mkdir()
                for rel in spec.files:
                    shutil.copyfile(_manifest(module_dir, source, rel),
                                    op.files_dir / Path(rel).name)
            shutil.rmtree(op.crds_dir, ignore_errors=True)
            crds.rename(op.crds_dir)
            partial.rename(op.binary)
        built.append(op)
    return tuple(built)


def ensure_peers(*, rebuild: bool = False) -> tuple[OperatorBinary, ...]:
    """Build (or find cached) the peers of ``PEERS`` (Kueue), like the operators; raises
    BuildError when one has no wrapper module (a peer asked for is never silently absent)."""
    missing = [p.name for p in PEERS if not (wrapper_dir() / p.name / "go.mod").exists()]
    if missing:
        raise BuildError(f"no wrapper module for {', '.join(missing)} under {wrapper_dir()}")
    return ensure_operators(rebuild=rebuild, builds=PEERS)


def minor_of(version: str) -> str:
    """ "v1.37.2" -> "1.37"."""
    return ".".join(version.lstrip("v").split(".")[:2])


def _kubernetes_jobs(bins: Binaries, module: Path, *, members: bool
                     ) -> list[tuple[Path, Path, str, str]]:
    ldflags = _k8s_ldflags(bins.kubernetes_version)
    names = ["kube-apiserver", "kubectl", "kube-controller-manager"]
    if members:
        names.append("kube-scheduler")
    outputs = {"kube-apiserver": bins.kube_apiserver, "kubectl": bins.kubectl,
               "kube-controller-manager": bins.kube_controller_manager,
               "kube-scheduler": bins.kube_scheduler}
    return [(outputs[n], module, f"k8s.io/kubernetes/cmd/{n}", ldflags) for n in names]


def _run_jobs(jobs: list[tuple[Path, Path, str, str]], log: Path) -> None:
    for output, module, package, ldflags in jobs:
        if output.exists():
            continue
        partial = output.with_suffix(".partial")
        _go_build(module=module, package=package, output=partial, ldflags=ldflags, log=log)
        partial.rename(output)


def _other_minor(minor: str, base: Binaries, *, rebuild: bool, members: bool) -> Binaries:
    """Kubernetes ``minor``'s own four binaries (cached by their module alone), with
    ``base``'s etcd and kwok."""
    module = wrapper_dir() / KUBERNETES_MODULES[minor]
    version = _required_version(module / "go.mod", "k8s.io/kubernetes")
    target = cache_root() / f"k8s-{version}-{_key(module)}"
    if rebuild and target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True, exist_ok=True)
    bins = replace(base, kube_apiserver=target / "kube-apiserver", kubectl=target / "kubectl",
                   kube_scheduler=target / "kube-scheduler",
                   kube_controller_manager=target / "kube-controller-manager",
                   kubernetes_version=version, operators=(), minors={})
    _run_jobs(_kubernetes_jobs(bins, module, members=members), target / "build.log")
    return bins


def ensure_binaries(*, rebuild: bool = False, members: bool = True) -> Binaries:
    """Return the cached binaries, building whichever is missing.

    The result is the default minor's (the first of ``KUBERNETES_MODULES``); ``.at(minor)``
    gives every other pinned minor's. ``members=False`` builds only what a light fleet runs:
    etcd, kube-apiserver, kubectl and kube-controller-manager (its dedicated hub runs one);
    kube-scheduler and kwok are still returned but may not exist, and no operator is built.
    Raises BuildError when Go is missing or a build fails; never returns partial results of
    what was asked for.
    """
    root = wrapper_dir()
    default, *others = KUBERNETES_MODULES
    k8s_mod = root / KUBERNETES_MODULES[default]
    etcd_mod, kwok_mod = root / "etcd", root / "kwok"
    k8s_version = _required_version(k8s_mod / "go.mod", "k8s.io/kubernetes")
    etcd_version = _required_version(etcd_mod / "go.mod", "go.etcd.io/etcd/server/v3")
    kwok_version = _required_version(kwok_mod / "go.mod", "sigs.k8s.io/kwok")
    key = _key(k8s_mod, etcd_mod, kwok_mod)
    target = cache_root() / f"k8s-{k8s_version}-etcd-{etcd_version}-kwok-{kwok_version}-{key}"
    bins = Binaries(kube_apiserver=target / "kube-apiserver", kubectl=target / "kubectl",
                    etcd=target / "etcd", kube_scheduler=target / "kube-scheduler",
                    kube_controller_manager=target / "kube-controller-manager",
                    kwok=target / "kwok", kubernetes_version=k8s_version,
                    etcd_version=etcd_version, kwok_version=kwok_version)
    if rebuild and target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True, exist_ok=True)
    jobs = [(bins.etcd, etcd_mod, "go.etcd.io/etcd/server/v3", "-s -w"),
            *_kubernetes_jobs(bins, k8s_mod, members=members)]
    if members:
        jobs.append((bins.kwok, kwok_mod, "sigs.k8s.io/kwok/cmd/kwok", "-s -w"))
    _run_jobs(jobs, target / "build.log")
    minors = {minor: _other_minor(minor, bins, rebuild=rebuild, members=members)
              for minor in others}
    bins = replace(bins, minors={default: bins, **minors})
    if members:
        bins = replace(bins, operators=ensure_operators(rebuild=rebuild,
                                                        names=selected_operators()))
    return bins


def _helm_ldflags(version: str, go_mod: Path) -> str:
    """helm's Makefile ldflags: its version, and the Kubernetes version it assumes when no
    cluster is asked (``helm template``, ``helm lint``): client-go v0.X -> 1.X."""
    client_go = _required_version(go_mod, "k8s.io/client-go")
    minor = client_go.lstrip("v").split(".")[1]
    parts = ["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={version}",
             "-X helm.sh/helm/v3/internal/version.gitTreeState=clean"]
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        parts += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={minor}"]
    return " ".join(parts)


def ensure_helm(*, rebuild: bool = False) -> Path:
    """The ``helm`` binary of the pinned wrapper module ``deploy/local/helm`` (built once,
    then cached under its own key); raises BuildError when Go is missing or the build
    fails."""
    module = wrapper_dir() / "helm"
    version = _required_version(module / "go.mod", "helm.sh/helm/v3")
    target = cache_root() / f"helm-{version}-{_key(module)}"
    binary = target / "helm"
    if rebuild and target.exists():
        shutil.rmtree(target)
    if not binary.exists():
        target.mkdir(parents=True, exist_ok=True)
        partial = binary.with_suffix(".partial")
        _go_build(module=module, package="helm.sh/helm/v3/cmd/helm", output=partial,
                  ldflags=_helm_ldflags(version, module / "go.mod"), log=target / "build.log")
        partial.rename(binary)
    return binary


def selected_operators() -> list[str] | None:
    """The operators named in ``DISPATCHER_DEV_OPERATORS`` (comma-separated; "" for none),
    or None (every operator of ``OPERATORS``) when it is unset."""
    value = os.environ.get("DISPATCHER_DEV_OPERATORS")
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = set(names) - {op.name for op in OPERATORS}
    if unknown:
        raise BuildError(f"DISPATCHER_DEV_OPERATORS: unknown operator(s) {sorted(unknown)} "
                         f"(known: {', '.join(op.name for op in OPERATORS)})")
    return names


def main() -> int:
    """Entry point for ``python -m dispatcher.devfleet.binaries`` (``--peers``: Kueue too)."""
    try:
        bins = ensure_binaries(rebuild="--rebuild" in sys.argv)
        helm = ensure_helm(rebuild="--rebuild" in sys.argv)
        if "--peers" in sys.argv:
            bins = replace(bins, operators=(*bins.operators,
                                            *ensure_peers(rebuild="--rebuild" in sys.argv)))
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in (bins.etcd, bins.kwok):
        _say(f"{path.name}: {path.stat().st_size / 2**20:.0f} MiB")
    for minor in bins.minors:
        at = bins.at(minor)
        for path in (at.kube_apiserver, at.kubectl, at.kube_scheduler,
                     at.kube_controller_manager):
            _say(f"{path.name} {at.kubernetes_version}: "
                 f"{path.stat().st_size / 2**20:.0f} MiB")
    _say(f"helm: {helm.stat().st_size / 2**20:.0f} MiB")
    for op in bins.operators:
        _say(f"{op.name} {op.version}: {op.binary.stat().st_size / 2**20:.0f} MiB, "
             f"CRDs {', '.join(p.name for p in op.crd_files())}")
    print(bins.kube_apiserver.parent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
