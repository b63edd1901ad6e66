"""The fleet's commands and options as a user types them: `nanum node set|drain|resume|remove`, what `nanum nodes`
says under its table, `nanum logs --node`, and the submit options `--gpu-model A,B`, `--gpu-mem`, `--constraint`
and `--torchrun` (on the command line and in `#NANUM` lines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nanum.cli.base import UsageProblem
from nanum.cli.jobspec import SubmitOptions, build_request, parse_header_args
from tests.cli.conftest import Nanum
from tests.cli.fakeapi import Answer, FakeApi
from tests.cli.test_node_commands import node


def test_node_set_sends_only_what_was_given_and_says_what_the_node_is_now(api: FakeApi, nanum: Nanum) -> None:
    api.on("PATCH", "/nodes/gpu-01", {**node("gpu-01", 2), "owner": "vision", "labels": {"net": "ib"}})
    result = nanum("node", "set", "gpu-01", "--lab", "vision", "--label", "net=ib")
    assert (result.exit_code, result.stdout) == (0, "gpu-01: up; owner vision; labels net=ib; GPU model A100\n")
    assert api.sent("PATCH", "/nodes/gpu-01")[0].body == {"owner": "vision", "labels": ["net=ib"], "gpu_model": None}
    nothing = nanum("node", "set", "gpu-01")
    assert nothing.exit_code == 2 and "nothing to set" in nothing.stderr
    unreadable = nanum("node", "set", "gpu-01", "--label", "net")
    assert unreadable.exit_code == 2
    assert "--label: cannot read 'net'; give a node label KEY=VALUE, e.g. net=ib" in unreadable.stderr
    assert len(api.sent("PATCH", "/nodes/gpu-01")) == 1  # the mistake never reached the server


def test_nodes_shows_drains_owners_labels_and_gpus_out_of_service(api: FakeApi, nanum: Nanum) -> None:
    sick = node("gpu-01", 2)
    sick.update(state="drained", drain_reason="new fans", owner="vision", labels={"rack": "r1", "net": "ib"})
    sick["gpus"][1]["health"] = "Xid 79 (fallen off the bus)"  # type: ignore[index]
    api.on("GET", "/nodes", [sick, node("gpu-02", 1)])
    lines = nanum("nodes").stdout.splitlines()
    assert lines[-3:] == [
        "! gpu-01 drained: new fans",
        "! gpu-01 GPU 1 out of service: Xid 79 (fallen off the bus) (`nanum node resume gpu-01` returns it)",
        "  gpu-01: owner vision; labels net=ib,rack=r1",
    ]


def test_drain_resume_and_remove(api: FakeApi, nanum: Nanum) -> None:
    api.on("POST", "/nodes/gpu-01/drain", {**node("gpu-01", 1), "state": "draining", "drain_reason": "PSU"})
    assert nanum("node", "drain", "gpu-01", "--reason", "PSU").stdout.startswith("gpu-01: draining (PSU);")
    assert api.sent("POST", "/nodes/gpu-01/drain")[0].body == {"reason": "PSU"}
    api.on("POST", "/nodes/gpu-01/resume", node("gpu-01", 1))
    assert nanum("node", "resume", "gpu-01", "--reason", "PSU replaced").stdout.startswith("gpu-01: up;")
    assert api.sent("POST", "/nodes/gpu-01/resume")[0].body == {"reason": "PSU replaced"}
    api.on("DELETE", "/nodes/gpu-01", {"detail": "node gpu-01 still runs job(s) 4; drain it"}, status=409)
    refused = nanum("node", "remove", "gpu-01")
    assert (refused.exit_code, refused.stderr) == (2, "nanum: error: node gpu-01 still runs job(s) 4; drain it\n")
    api.on("DELETE", "/nodes/gpu-01", Answer(status=204, text=""))
    assert nanum("node", "remove", "gpu-01", "--reason", "back to the vendor").stdout == "Node gpu-01 removed.\n"
    assert api.sent("DELETE", "/nodes/gpu-01")[-1].query == {"reason": ["back to the vendor"]}


def test_node_show_says_what_the_node_is_and_its_history(api: FakeApi, nanum: Nanum) -> None:
    sick = {**node("gpu-01", 2), "state": "drained", "drain_reason": "new fans"}
    sick["gpus"][1]["health"] = "Xid 79 (fallen off the bus)"  # type: ignore[index]
    sick["history"] = [
        {"time": "2026-12-01T09:00:00+00:00", "actor": "admin", "action": "drain", "changes": {},
         "message": "admin drained node gpu-01: new fans"},
        {"time": "2026-12-01T09:05:00+00:00", "actor": "nanum", "action": "health", "changes": {},
         "message": "GPU 1 of node gpu-01 taken out of service: Xid 79 (fallen off the bus)"},
    ]
    api.on("GET", "/nodes/gpu-01", sick)
    assert nanum("node", "show", "gpu-01").stdout.splitlines() == [
        "gpu-01: drained (new fans); owner -; labels -; GPU model A100",
        "GPU 1 out of service: Xid 79 (fallen off the bus)",
        "History:",
        "  2026-12-01 09:00:00  admin: admin drained node gpu-01: new fans",
        "  2026-12-01 09:05:00  nanum: GPU 1 of node gpu-01 taken out of service: Xid 79 (fallen off the bus)",
    ]
    dotted = nanum("node", "show", "../users")
    assert (dotted.exit_code, dotted.stderr) == (
        2, "nanum: error: '../users' cannot be a name: names are never empty, '.' or '..', and have no '/'\n")
    api.on("GET", "/nodes/gpu-09", {"detail": "no node named gpu-09; `nanum nodes` lists them"}, status=404)
    missing = nanum("node", "show", "gpu-09")
    assert missing.exit_code != 0 and "no node named gpu-09" in missing.stderr


def test_logs_of_one_node(api: FakeApi, nanum: Nanum) -> None:
    done = {"X-Nanum-Log-Offset": "7", "X-Nanum-Job-State": "completed"}
    api.on("GET", "/jobs/7/logs", Answer(text="rank 1\n", headers=done), Answer(text="", headers=done))
    result = nanum("logs", "7", "--node", "1")
    assert (result.exit_code, result.stdout) == (0, "rank 1\n")
    assert api.sent("GET", "/jobs/7/logs")[0].query["node"] == ["1"]


def test_header_options_and_their_mistakes() -> None:
    got = parse_header_args(["--gpu-model", "A100, H100", "--gpu-mem=40G", "--constraint", "net=ib",
                             "--constraint=rack=r1", "--torchrun"], "t.sh line 2")
    assert [got[k] for k in ("gpu_model", "gpu_memory_mb", "constraints", "torchrun")] == [
        "A100,H100", 40960, ["net=ib", "rack=r1"], True]
    for words, said in ((["--constraint", "ib"], "give a node label KEY=VALUE"),
                        (["--gpu-model", "A100,,H100"], "give a model such as A100"),
                        (["--gpu-mem", "lots"], "--gpu-mem: cannot read 'lots'"),
                        (["--constraint", "net=" + "x" * 5000], r"'net=x+'\.\.\. \(5004 characters\) is too long; "
                                                                "a label's key and its value have at most 63"),
                        (["--gpu-model", "A" * 65],
                         r"'A+'\.\.\. \(65 characters\) is too long; give at most 64 characters")):
        with pytest.raises(UsageProblem, match=said) as err:
            parse_header_args(words, "t.sh line 2")
        assert str(err.value).startswith("t.sh line 2: ") and "\n" not in str(err.value)


def test_torchrun_runs_the_script_itself_not_its_interpreter(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("#!/usr/bin/env python3\n#NANUM --nodes 2 --torchrun\nprint('hi')\n")
    body = build_request(["train.py", "--epochs", "3"], SubmitOptions(), tmp_path)
    assert (body["command"], body["nodes"], body["torchrun"]) == ([str(script), "--epochs", "3"], 2, True)
    other = tmp_path / "eval.py"
    other.write_text("#!/usr/bin/env python3\nprint('hi')\n")
    assert build_request(["eval.py"], SubmitOptions(), tmp_path)["command"] == ["/usr/bin/env", "python3", str(other)]
