"""``kubectl dispatcher``: kubectl's flags as kubectl passes them to a plugin (unread, after
the plugin name), in pflag's spellings, before or after the subcommand; the hub and the
namespace they select; help and usage errors; what ``why`` reads from Dispatches. No
cluster: the commands' own work is tested against the dev fleet
(tests/integration/test_kubectl_plugin.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from dispatcher import kubectl
from dispatcher.kubectl import UsageError, build_parser, context_namespace, normalize


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(normalize(argv))


@pytest.mark.parametrize(("given", "read"), [
    (["-n=team-a"], ["-n", "team-a"]),
    (["-o=json"], ["-o", "json"]),
    (["-nteam-a", "-ojson"], ["-nteam-a", "-ojson"]),  # argparse reads these itself
    (["--namespace=team-a"], ["--namespace=team-a"]),
    (["-A=true"], ["-A"]),
    (["-A=false"], []),
    (["--all-namespaces=True"], ["--all-namespaces"]),
    (["--all-namespaces=0"], []),
    (["why", "--", "-n=x"], ["why", "--", "-n=x"]),  # after --, nothing is a flag
])
def test_pflag_spellings_become_argparse_ones(given: list[str], read: list[str]) -> None:
    assert normalize(given) == read


@pytest.mark.parametrize("flag", ["--server=https://elsewhere", "-s", "--token", "--as",
                                  "--user", "--cluster", "--insecure-skip-tls-verify",
                                  "-v=4"])
def test_kubectl_flags_it_cannot_honour_are_refused_by_name(flag: str) -> None:
    with pytest.raises(UsageError, match=flag.partition("=")[0]):
        normalize(["why", "jobset/x", flag])


def test_a_switch_with_a_junk_value_is_refused() -> None:
    with pytest.raises(UsageError, match="true or false"):
        normalize(["-A=maybe"])


@pytest.mark.parametrize("argv", [
    ["why", "-n", "team-a", "jobset/train", "-o", "json", "--context", "hub",
     "--kubeconfig", "/k"],
    ["-n", "team-a", "--context=hub", "why", "jobset/train", "-ojson", "--kubeconfig=/k"],
    ["--kubeconfig", "/k", "-n=team-a", "-o=json", "--context", "hub", "why", "jobset/train"],
])
def test_flags_read_the_same_before_or_after_the_subcommand(argv: list[str]) -> None:
    args = parse(*argv)
    assert (args.command, args.target, args.namespace, args.output, args.context,
            args.kubeconfig) == ("why", "jobset/train", "team-a", "json", "hub", "/k")


def test_a_flag_after_the_subcommand_wins_over_one_before() -> None:
    assert parse("-n", "a", "why", "-n", "b").namespace == "b"


def test_defaults_leave_the_choice_to_the_kubeconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISPATCHER_CONFIG", raising=False)
    args = parse("why")
    assert (args.namespace, args.output, args.context, args.kubeconfig, args.config,
            args.all_namespaces, args.target) == (None, None, None, None, None, False, None)
    monkeypatch.setenv("DISPATCHER_CONFIG", "/etc/dispatcher/config.yaml")
    assert parse("clusters").config == "/etc/dispatcher/config.yaml"
    assert parse("clusters", "--config", "other.yaml").config == "other.yaml"


def test_each_command_takes_its_own_arguments() -> None:
    assert parse("explain", "jobset/a", "--policy", "best-fit").policy == "best-fit"
    args = parse("inspect", "jobset/a", "pytorchjob/b", "-f", "x.yaml", "-f=-")
    assert (args.targets, args.filename) == (["jobset/a", "pytorchjob/b"], ["x.yaml", "-"])
    assert parse("why", "-A").all_namespaces is True


@pytest.mark.parametrize("argv", [["-o", "name", "why"], ["explain"], ["why", "a", "b"],
                                  ["frobnicate"]])
def test_bad_command_lines_are_usage_errors(argv: list[str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        kubectl.main(argv)
    assert exit_.value.code == 2
    assert "usage: kubectl dispatcher" in capsys.readouterr().err


def test_help_is_the_plugins_own(capsys: pytest.CaptureFixture[str]) -> None:
    """``kubectl dispatcher --help`` reaches the plugin (kubectl passes it through)."""
    with pytest.raises(SystemExit) as exit_:
        kubectl.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kubectl dispatcher")
    for command in ("why", "explain", "inspect", "clusters"):
        assert command in out
    assert kubectl.main([]) == 0  # no command: the same help
    assert capsys.readouterr().out.startswith("usage: kubectl dispatcher")
    with pytest.raises(SystemExit):
        kubectl.main(["why", "--help"])
    assert capsys.readouterr().out.startswith("usage: kubectl dispatcher why")


def test_unsupported_flag_exits_as_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        kubectl.main(["why", "jobset/x", "--server", "https://elsewhere"])
    assert exit_.value.code == 2
    assert "--server is a kubectl flag kubectl dispatcher does not honour" in \
        capsys.readouterr().err


def test_all_namespaces_does_not_apply_to_a_named_workload(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = _kubeconfig(tmp_path)
    for argv in (["explain", "jobset/x", "-A"], ["inspect", "jobset/x", "-A"]):
        with pytest.raises(SystemExit) as exit_:
            kubectl.main([*argv, "--kubeconfig", str(kubeconfig)])
        assert exit_.value.code == 2
        assert "-A does not apply" in capsys.readouterr().err


KUBECONFIG = {
    "apiVersion": "v1", "kind": "Config", "current-context": "hub",
    "contexts": [{"name": "hub", "context": {"cluster": "c", "user": "u",
                                             "namespace": "team-a"}},
                 {"name": "bare", "context": {"cluster": "c", "user": "u"}}],
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
}


def _kubeconfig(tmp_path: Path, data: object = None) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(KUBECONFIG if data is None else data))
    return path


@pytest.mark.parametrize(("context", "namespace"), [(None, "team-a"), ("hub", "team-a"),
                                                    ("bare", None), ("absent", None)])
def test_the_contexts_namespace_is_the_default(context: str | None,
                                               namespace: str | None) -> None:
    assert context_namespace(KUBECONFIG, context) == namespace


@pytest.mark.parametrize("junk", [None, "text", [], {"contexts": "x"},
                                  {"current-context": "a", "contexts": [{"name": "a"}]}])
def test_a_kubeconfig_without_a_namespace_says_none(junk: object) -> None:
    assert context_namespace(junk, None) is None


def test_the_hub_and_namespace_follow_kubectls_flags(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    setup = kubectl._setup
    kubeconfig = _kubeconfig(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    config, namespace = setup(parse("why"))
    assert (config.hub_kubeconfig, config.hub_context, namespace) == (None, None, "team-a")
    config, namespace = setup(parse("why", "--context", "bare"))
    assert (config.hub_context, namespace) == ("bare", "default")
    assert setup(parse("why", "-n", "mine", "--context", "bare"))[1] == "mine"

    # a controller config naming its hub, and --kubeconfig over it (with its own context)
    other = tmp_path / "other"
    other.write_text(yaml.safe_dump({**KUBECONFIG, "current-context": "bare"}))
    controller = tmp_path / "config.yaml"
    controller.write_text(yaml.safe_dump({"hub": {"kubeconfig": "other", "context": "hub"}}))
    config, namespace = setup(parse("why", "--config", str(controller)))
    assert (config.hub_kubeconfig, config.hub_context, namespace) == (
        str(other), "hub", "team-a")
    config, namespace = setup(parse("why", "--config", str(controller),
                                    "--kubeconfig", str(kubeconfig)))
    assert (config.hub_kubeconfig, config.hub_context, namespace) == (
        str(kubeconfig), None, "team-a")


def test_an_unreadable_kubeconfig_leaves_the_namespace_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert kubectl._setup(parse("why"))[1] == "default"
    (tmp_path / "broken").write_text("{not: yaml: at all")
    assert kubectl._setup(parse("why", "--kubeconfig", str(tmp_path / "broken")))[1] == \
        "default"


def test_a_bad_controller_config_is_an_error_not_a_trace(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("hub: {mode: sometimes}\n")
    assert kubectl.main(["why", "--config", str(config)]) == 1
    assert "hub.mode" in capsys.readouterr().err


def test_the_package_installs_the_plugin_executable() -> None:
    """kubectl finds ``kubectl-dispatcher`` on PATH: the package's console script."""
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["kubectl-dispatcher"] == "dispatcher.kubectl:main"


def dispatch(name: str, *, phase: str, reason: str = "", message: str = "",
             since: str | None = "2026-01-01T00:00:00Z", namespace: str = "team-a"
             ) -> dict[str, object]:
    conditions = [{"type": "Placed", "status": "False" if phase == "Pending" else "True",
                   "reason": reason, "message": message, "lastTransitionTime": since}]
    return {"metadata": {"name": f"jobset-{name}", "namespace": namespace,
                         "creationTimestamp": "2025-12-31T23:00:00Z"},
            "spec": {"workload": {"kind": "JobSet", "name": name}},
            "status": {"phase": phase, "conditions": conditions,
                       "decision": {"cluster": "m1" if phase != "Pending" else None,
                                    "attempt": 1, "summary": "s"},
                       "attempts": [{"cluster": "m2", "attempt": 1, "outcome": "rejected",
                                     "reason": "HTTP 403"}], "excluded": ["m2"]}}


def test_why_lists_only_waiting_workloads_longest_wait_first() -> None:
    from dispatcher.commands.why import pending_rows
    from dispatcher.control.core.record import parse_time

    now = parse_time("2026-01-01T01:00:00Z")
    assert now is not None
    rows = pending_rows([
        dispatch("a", phase="Pending", reason="NoFeasibleMember", message="full"),
        dispatch("b", phase="Running"),
        dispatch("c", phase="Pending", reason="Unplaceable", since="2025-12-31T12:00:00Z",
                 namespace="team-b"),
        {"metadata": {"name": "jobset-d", "namespace": "team-a",
                      "creationTimestamp": "2026-01-01T00:59:00Z"},
         "spec": {"workload": {"kind": "JobSet", "name": "d"}}},  # no status yet
    ], now=now)
    assert [(r["workload"], r["reason"], r["waiting"]) for r in rows] == [
        ("JobSet/c", "Unplaceable", 13 * 3600.0), ("JobSet/a", "NoFeasibleMember", 3600.0),
        ("JobSet/d", "NotDecided", 60.0)]
    assert rows[1]["message"] == "full" and rows[0]["namespace"] == "team-b"


def test_why_reads_where_a_workload_went_from_its_dispatch() -> None:
    from dispatcher.commands.why import dispatch_summary

    placed = dispatch_summary(dispatch("a", phase="Running"))
    assert (placed["phase"], placed["cluster"], placed["attempt"]) == ("Running", "m1", 1)
    waiting = dispatch_summary(dispatch("a", phase="Pending", reason="Unplaceable",
                                        message="no member could"))
    assert (waiting["reason"], waiting["message"], waiting["excluded"]) == (
        "Unplaceable", "no member could", ["m2"])
    assert waiting["attempts"][0]["outcome"] == "rejected"
    assert dispatch_summary({})["phase"] == ""
    assert waiting["numbersAsOf"] is None and placed["numbersAsOf"] is None
    written = dispatch("a", phase="Pending", reason="NoFeasibleMember", message="full")
    written["status"]["pending"] = {"key": "k", "writtenAt": "2026-01-01T00:30:00Z"}  # type: ignore[index]
    assert dispatch_summary(written)["numbersAsOf"] == "2026-01-01T00:30:00Z"
