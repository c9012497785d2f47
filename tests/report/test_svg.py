"""The report's inline SVG charts: labelled axes with units, a log axis where values span orders of magnitude,
intervals and reference lines where given."""

from __future__ import annotations

import re

from gpufly.report.svg import Bar, bar_chart, choose_axis


def test_values_within_a_factor_of_thirty_get_a_linear_axis_from_zero() -> None:
    axis = choose_axis([120.0, 990.0])
    assert not axis.log and axis.bottom == 0.0 and axis.top >= 990.0
    assert axis.ticks()[0] == 0.0 and axis.x(0.0) == axis.left


def test_values_spanning_orders_of_magnitude_get_a_log_axis_with_power_of_ten_ticks() -> None:
    axis = choose_axis([0.5, 40.0, 2000.0])
    assert axis.log
    assert axis.ticks() == [0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0]
    assert axis.x(0.1) == axis.left and axis.x(10000.0) == axis.left + axis.width


def test_a_chart_names_its_axis_and_unit_and_draws_every_bar() -> None:
    bars = [Bar("H100 SXM", 989.0, "#D55E00", text="989 TFLOPS", highlight=True),
            Bar("A100 80GB SXM", 312.0, "#E69F00", text="312 TFLOPS", hatched=True)]
    svg = bar_chart(bars, title="dense rate", axis_label="dense BF16 rate (TFLOPS)", chart_id="rate",
                    legend=[("Hopper", "#D55E00"), ("Ampere", "#E69F00")])
    assert svg.startswith('<svg class="chart" id="rate"') and svg.endswith("</svg>")
    assert 'data-bars="2"' in svg and len(re.findall(r'<rect class="bar"', svg)) == 2
    assert "dense BF16 rate (TFLOPS)</text>" in svg and ">Hopper</text>" in svg
    assert 'stroke="#000000"' in svg, "this GPU is outlined"
    assert 'fill="url(#hatch-rate)"' in svg, "a derived figure is hatched"


def test_a_log_chart_says_so_on_its_axis() -> None:
    svg = bar_chart([Bar("a", 1.0), Bar("b", 5000.0)], title="t", axis_label="decode (tok/s)", chart_id="x")
    assert "decode (tok/s) (log scale)" in svg and 'data-log="1"' in svg


def test_an_interval_and_a_reference_line_are_drawn_when_given() -> None:
    svg = bar_chart([Bar("gemm.bf16", 66.0, low=64.0, high=67.0, reference=100.0)], title="t",
                    axis_label="% of the datasheet peak", chart_id="reach", log=False)
    assert svg.count('class="interval"') == 1 and svg.count('class="reference"') == 1
