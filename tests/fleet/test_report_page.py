"""A fleet saved by `gpufly fleet run --save` (a node that timed out among them) as the fleet section of
`gpufly report --fleet DIR`: the page and the JSON name the failed node, as `gpufly fleet report` does."""

from __future__ import annotations

import json
from pathlib import Path

from gpufly.fleet import NodeData, save_node
from tests.fleet.builders import facts, run


def test_a_node_that_timed_out_is_a_finding_in_the_report(cli, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    for name in ("node01", "node02"):
        save_node(fleet, NodeData(name, facts(), (run(0), run(1))))
    save_node(fleet, NodeData("node03", problems=("timed out after 1800 s",)))
    page = tmp_path / "report.html"

    done = cli("report", "--fleet", str(fleet), "--html", str(page), "--json")

    assert done.code == 0, done.stderr
    data = json.loads(done.stdout)["fleet"]
    assert [(node["name"], node["failed"]) for node in data["nodes"]] == [
        ("node01", False), ("node02", False), ("node03", True)]
    assert [f["message"] for f in data["findings"]] == ["node03: timed out after 1800 s"]
    html = page.read_text()
    assert "node03: timed out after 1800 s" in html and 'id="fleet-0-gemm-bf16"' in html
