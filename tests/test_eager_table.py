"""``python -m bench.eager_latency --table``: the README's table and the issue-22 verdicts come
from a saved run (pure function of the file)."""

from bench.eager_latency import markdown


def _row(call, arrays, us, floor, tiny):
    return dict(call=call, arrays=arrays, us=us, floor_us=floor, over_prepare_us=us - floor,
                tinygemm_us=tiny, error=1e-4)


def test_the_table_lists_every_row_and_judges_each_target():
    doc = dict(device={"name": "GPU"}, git={"commit": "abc"}, command="python -m bench.eager_latency",
               rows=[_row("gemv(tuning=None)", "torch", 9.0, 6.0, 8.5),
                     _row('gemv(tuning=Tuning(variant="auto"))', "torch", 7.4, 6.0, 8.5),
                     _row("prepare()()", "torch", 6.0, 6.0, 8.5)])
    text = markdown(doc)
    assert text.count("\n| `") == 3 and "| +3.00 |" in text
    assert "tuning=None: +3.00 us over prepare (target <= +3.0): holds" in text
    assert "tuning=None 9.00 us vs tinygemm 8.50 us: MISSED" in text
    assert "Tuning object: +1.40 us over prepare (target <= +1.5): holds" in text
