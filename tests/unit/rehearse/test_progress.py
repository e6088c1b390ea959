"""The rehearsal's progress line: redrawn on a terminal, a short log elsewhere."""

from __future__ import annotations

import io

from nodeops.rehearse.progress import ProgressLine, RollPace, duration


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_durations_read_as_a_person_reads_them() -> None:
    assert [duration(s) for s in (0, 12.4, 61, 245, 3720, -3)] == [
        "0s",
        "12s",
        "1m01s",
        "4m05s",
        "1h02m00s",
        "0s",
    ]


def test_the_time_left_comes_from_the_pace_so_far() -> None:
    clock = Ticks()
    pace = RollPace(clock)
    assert pace.line(0, 200, 0.0) == (
        "rolling the copy: 0 of 200 nodes replaced, 0s simulated, 0s so far"
    )
    clock.now = 60.0
    # 40 nodes in a minute: 160 more take four.
    assert pace.line(40, 200, 600.0) == (
        "rolling the copy: 40 of 200 nodes replaced, 10m00s simulated, 1m00s so far, "
        "about 4m00s left"
    )
    assert "(2 failed)" in pace.line(40, 200, 600.0, failed=2)
    assert "left" not in pace.line(200, 200, 1200.0)
    assert "0 of ? nodes" in pace.line(0, 0, 0.0)


def test_a_terminal_gets_one_line_redrawn_at_most_every_redraw_seconds() -> None:
    out, clock = io.StringIO(), Ticks()
    line = ProgressLine(out, terminal=True, redraw=1.0, clock=clock)
    line.step("copy loaded in 3s; settling")
    line.roll("rolling 1", 1, 10)
    clock.now = 0.5
    line.roll("rolling 2", 2, 10)  # too soon: not drawn
    clock.now = 1.0
    line.roll("rolling 3", 3, 10)
    line.roll("rolling 10", 10, 10)  # the last node is always drawn
    line.roll("rolling 10 again", 10, 10)  # once
    line.step("roll ended")  # the last count stays on screen above it
    line.close()
    assert out.getvalue() == (
        "\r\x1b[Kcopy loaded in 3s; settling\n"
        "\r\x1b[Krolling 1"
        "\r\x1b[Krolling 3"
        "\r\x1b[Krolling 10"
        "\n\r\x1b[Kroll ended\n"
    )


def test_what_is_being_read_is_drawn_over_by_the_next_step() -> None:
    out = io.StringIO()
    line = ProgressLine(out, terminal=True)
    line.meanwhile("reading the cluster for workers")
    line.step("loading the copy")
    assert out.getvalue() == ("\r\x1b[Kreading the cluster for workers\r\x1b[Kloading the copy\n")


def test_a_log_gets_a_line_a_step_and_one_a_tenth_of_the_nodes() -> None:
    out = io.StringIO()
    line = ProgressLine(out, terminal=False)
    line.meanwhile("reading the cluster")  # a terminal's only
    line.step("loading the copy")
    for ended in range(0, 201):
        line.roll(f"rolling {ended}", ended, 200)
    line.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "loading the copy"
    assert lines[1:] == [f"rolling {n}" for n in range(0, 201, 20)]


def test_bad_input_after_reading_wipes_the_line_on_a_terminal() -> None:
    out = io.StringIO()
    line = ProgressLine(out, terminal=True)
    line.meanwhile("reading the cluster for workers")
    line.close(clear=True)
    assert out.getvalue() == "\r\x1b[Kreading the cluster for workers\r\x1b[K"
    line.close(clear=True)  # nothing open any more: nothing written
    assert out.getvalue().count("\r\x1b[K") == 2
