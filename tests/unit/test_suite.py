"""`make test` runs pytest through `testbed.suite`: two lanes at once, one without the real nodes
(the unit tier, the fleet bed, the emulated testbed) and one on them. Together they must select
every test a plain `pytest` does, each once; the suite must fail when either fails; and a bad
`--cluster-groups` is a usage error that names the flag."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import suite
from testbed.pytest_plugin import GROUPS_OPTION, parse_groups

ROOT = Path(__file__).resolve().parents[2]
# One module of each cluster group: 0 (its own fleet bed), 1 (the emulated testbed), 2 (the real
# nodes), 3 (the real nodes, reshaped), and the unit tier.
MODULES = (
    "tests/e2e/test_fleet.py",
    "tests/e2e/test_smoke.py",
    "tests/e2e/test_real_nodes.py",
    "tests/e2e/test_real_nodes_helm.py",
    "tests/e2e/test_real_nodes_upgrade.py",  # marked `upgrade`: deselected in every run
    "tests/unit/test_cli.py",
)


def _collect(args: tuple[str, ...]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*args, "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _ids(output: str) -> list[str]:
    return [line for line in output.splitlines() if "::" in line]


def test_the_two_lanes_select_every_test_once() -> None:
    """Each lane collected over a few modules of every group, beside a plain run."""
    lanes = suite.plan(())
    # The lane's own arguments, with its `tests` folder narrowed to the modules above.
    narrowed = [(*lane.args[: lane.args.index("tests")], *MODULES) for lane in lanes]
    procs = [_collect(args) for args in [*narrowed, (sys.executable, "-m", "pytest", *MODULES)]]
    outputs = [proc.communicate()[0] for proc in procs]
    *parts, whole = [_ids(output) for output in outputs]
    assert all(parts), outputs
    selected = [test for part in parts for test in part]
    assert len(selected) == len(set(selected))  # none selected twice
    assert sorted(selected) == sorted(whole), outputs
    # Only the lane whose groups hold the `upgrade` test says it left it out.
    upgrade_note = "tests marked `upgrade` deselected"
    assert upgrade_note not in outputs[0] and upgrade_note in outputs[1], outputs
    emulated, real = ([test.split("::")[0] for test in part] for part in parts)
    # Each lane keeps the plugin's order: no cluster, the emulated testbed; the real nodes, the
    # modules that reshape the real install last.
    assert list(dict.fromkeys(emulated)) == [
        "tests/e2e/test_fleet.py",
        "tests/unit/test_cli.py",
        "tests/e2e/test_smoke.py",
    ]
    assert list(dict.fromkeys(real)) == [
        "tests/e2e/test_real_nodes.py",
        "tests/e2e/test_real_nodes_helm.py",
    ]


def test_the_lanes_pass_the_arguments_on_and_keep_their_own_caches() -> None:
    lanes = suite.plan(["-x"], python="py")
    assert [lane.name for lane in lanes] == ["emulated", "real-nodes"]
    assert all(lane.args[-2:] == ("tests", "-x") for lane in lanes)
    caches = {arg for lane in lanes for arg in lane.args if arg.startswith("cache_dir=")}
    assert len(caches) == 2


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ((0, 0, 0), 0),
        ((5, 0, 5), 0),  # nothing collected is not a failure
        ((0, 1, 0), 1),
        ((2, 1, 0), 2),  # the first failure's status, in plan order
        ((0, 5, 3), 3),
    ],
)
def test_the_suite_fails_when_any_process_fails(codes: tuple[int, ...], expected: int) -> None:
    assert suite.verdict(codes) == expected


def test_lanes_run_at_once_tagged_and_their_summaries_are_kept(tmp_path: Path) -> None:
    py = sys.executable
    lanes = [
        suite.Lane("slow", (py, "-c", "import time; time.sleep(0.6); print('slow line')")),
        suite.Lane("fast", (py, "-c", "print('fast line'); raise SystemExit(1)")),
    ]
    sink = tmp_path / "out"
    start = time.monotonic()
    with sink.open("wb") as out:
        results = suite.run(lanes, out)
    assert time.monotonic() - start < 0.6 + 0.5 + 2  # at once, not one after the other
    assert [(lane.name, code, lines) for lane, code, _, lines in results] == [
        ("slow", 0, ["slow line"]),
        ("fast", 1, ["fast line"]),
    ]
    (_, _, slow, _), (_, _, fast, _) = results
    assert fast < slow  # each its own time
    assert sink.read_text().splitlines() == ["[fast] fast line", "[slow] slow line"]


def test_the_summary_is_what_pytest_ends_with() -> None:
    ran = [
        "tests/a.py ..s",
        "=== short test summary info ===",
        "SKIPPED [1] a.py: why",
        "=== 2 passed",
    ]
    assert suite.summary(ran) == ran[1:]
    assert suite.summary(["tests/a.py ..", "=== 2 passed in 1s ==="]) == ["=== 2 passed in 1s ==="]


def test_cluster_groups_are_checked() -> None:
    assert parse_groups("1, 2,3") == {1, 2, 3}
    for bad in ("4", "x", "", "1,,2"):
        with pytest.raises(pytest.UsageError, match=GROUPS_OPTION):
            parse_groups(bad)


def test_make_test_runs_the_suite() -> None:
    makefile = (ROOT / "Makefile").read_text()
    target = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "$(PY) -m testbed.suite" in target
    assert "-m pytest" not in target
