"""Which leftover processes a new test run stops (on a made-up /proc, so nothing real dies)."""

from __future__ import annotations

from pathlib import Path

from dispatcher.devfleet.orphans import orphans

BIN = Path("/home/u/.cache/dispatcher/bin")
MARK = "/tmp/pytest-of-u/"


def _proc(root: Path, pid: int, parent: int, argv: list[str]) -> None:
    where = root / str(pid)
    where.mkdir()
    (where / "stat").write_text(f"{pid} (some (odd) name) S {parent} {pid} {pid} 0 -1\n")
    (where / "cmdline").write_bytes("\0".join(argv).encode() + b"\0")


def test_only_orphans_of_ours_from_the_killed_run_are_picked(tmp_path: Path) -> None:
    etcd = f"{BIN}/k8s-abc/etcd"
    _proc(tmp_path, 10, 1, [etcd, f"--data-dir={MARK}pytest-3/realfleet0/etcd"])
    _proc(tmp_path, 11, 1, ["/usr/bin/python3", "-m", "dispatcher", "run", "--config",
                            f"{MARK}pytest-3/e2e0/config.yaml"])
    _proc(tmp_path, 12, 1, [etcd, "--data-dir=/home/u/.local/state/dispatcher/devfleet/etcd"])
    _proc(tmp_path, 13, 4242, [etcd, f"--data-dir={MARK}pytest-4/devfleet0/etcd"])
    _proc(tmp_path, 14, 1, ["/usr/bin/sleep", f"{MARK}x"])
    _proc(tmp_path, 15, 1, ["/usr/bin/python3", "-m", "pytest", f"{MARK}x"])
    (tmp_path / "self").mkdir()
    # 10, 11: orphans of ours in the killed run's directory; 12: `dispatcher dev up`'s
    # fleet; 13: a live run's (its pytest is the parent); 14, 15: not our programs
    assert orphans(marker=MARK, programs=BIN, proc=tmp_path) == [10, 11]
