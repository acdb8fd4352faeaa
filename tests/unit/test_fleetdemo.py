"""The fleet scene's printing (`testbed.fleetdemo`), from objects as the API servers serve them."""

from __future__ import annotations

from chain.fleet_pools import fleet_check_name
from testbed.fleet import L4_POOL
from testbed.fleetdemo import dispatch_line, job_line, pool_rows, table, view_cell
from testbed.nodes import T4_POOL


def _type(name: str, summary: str | None, acceleratable: bool = True) -> dict[str, object]:
    status: dict[str, object] = {
        "accelerator": {"onceMaxRequest": "4", "remaining": "12", "capacity": "12"},
        "acceleratorShared": {"onceMaxRequest": "40", "remaining": "120", "capacity": "120"},
    }
    if summary is not None:
        status["memberSummary"] = summary
    return {"metadata": {"name": name}, "spec": {"acceleratable": acceleratable}, "status": status}


def test_a_view_cell_reads_as_the_printer_columns() -> None:
    assert (
        view_cell(
            {"accelerator": {"onceMaxRequest": 2, "remaining": 3, "capacity": 4}}, "accelerator"
        )
        == "2/3 of 4"
    )
    assert view_cell({}, "acceleratorSliced") == "-"


def test_pool_rows_are_the_card_pools_by_name() -> None:
    types = [
        _type(T4_POOL, "2/2 member-a,member-b"),
        _type("cpu", None, False),
        _type(L4_POOL, None),
    ]
    rows = pool_rows("manager", types)
    assert [row[1] for row in rows] == [L4_POOL, T4_POOL]
    assert rows[1] == (
        "manager",
        T4_POOL,
        "2/2 member-a,member-b",
        "4/12 of 12",
        "40/120 of 120",
        "-",
    )
    assert rows[0][2] == "-"  # a member's own type has no members


def test_the_table_lines_up_its_columns() -> None:
    text = table([("manager", "p", "1/1 b", "1/2 of 2", "-", "-")])
    header, row = text.splitlines()
    assert header.index("POOL") == row.index("p")
    assert header.index("MEMBERS") == row.index("1/1 b")


def test_the_dispatch_line_says_where_and_why() -> None:
    workload = {
        "status": {
            "clusterName": "member-b",
            "admissionChecks": [
                {
                    "name": fleet_check_name(L4_POOL),
                    "state": "Ready",
                    "message": 'The workload got reservation on "member-b"',
                }
            ],
        }
    }
    assert dispatch_line("j", workload, L4_POOL) == (
        "job j: MultiKueue check Ready, dispatched to member-b: "
        'The workload got reservation on "member-b"'
    )
    assert dispatch_line("j", None, L4_POOL) == "job j: MultiKueue check not yet, dispatched to -"


def test_the_job_line_shows_success_and_completion() -> None:
    job = {
        "metadata": {"name": "j"},
        "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
    }
    assert job_line("manager", job) == "manager: job j succeeded=1 Complete=True"
    assert job_line("member-b", None) == "member-b: job ? succeeded=0 Complete=-"
