import pytest

from adsl.figures import compute_table, render
from adsl.figures.registry import registry
from adsl.perf.roofline import crossover_intensity

REG = registry()


def test_registry_is_consistent():
    for name, spec in REG.figures.items():
        assert spec.table in REG.tables, name
        assert len(spec.text) > 40, f"{name}: a caption says what the figure shows"


def test_roofline_placements(ws):
    df = compute_table("roofline_points", ws).set_index(["point", "label"])
    cross = crossover_intensity(ws.hardware.system("saddle"))
    # The SADDLE device: PE throughput 5 x 6.03 TFLOP/s against 3352 GB/s of GPU-side bandwidth.
    assert cross == pytest.approx(5 * 670.4e9 * 9 / (5 * 670.4e9), rel=1e-3)
    # FC intensity ~ tokens in flight: TLM verifies batch x (d + 1) tokens.
    assert df.loc[("(12, 8)", "TLM FC"), "intensity_flop_per_byte"] == pytest.approx(12 * 9, rel=0.05)
    assert df.loc[("(12, 8)", "TLM FC"), "better_device"] == "GPU"
    assert df.loc[("(4, 1)", "DLM FC"), "better_device"] == "PIM"
    # Draft attention has one query per request: always memory-bound, always PIM.
    assert (df.xs("DLM Attn", level="label").better_device == "PIM").all()
    assert (df.xs("DLM Attn", level="label").intensity_flop_per_byte < 1.01).all()


def _needs_no_inputs(name):
    import inspect

    spec = REG.table_of(name)
    params = inspect.signature(spec.function).parameters.values()
    return [p.name for p in params if p.default is inspect.Parameter.empty and p.name not in spec.options] == ["ws"]


def test_figures_are_byte_identical_across_runs(ws, tmp_path):
    names = [n for n in REG.figures if _needs_no_inputs(n)]
    assert {"fig06_roofline", "validation_gpu"} <= set(names)
    for name in names:
        outs = []
        for run in ("a", "b"):
            d = tmp_path / run
            table = render(name, ws, pdf=d / f"{name}.pdf", png=d / f"{name}.png", csv=d / f"{name}.csv")
            assert len(table) > 0
            outs.append([(d / f"{name}.{ext}").read_bytes() for ext in ("pdf", "png", "csv")])
        assert outs[0] == outs[1], name
        assert b"CreationDate" not in outs[0][0]


def test_validation_table_has_sources(ws):
    df = compute_table("validation", ws)
    assert df.source.str.len().min() > 10
    assert {"gpt-fast", "AttAcc GPU", "Vidur MLP", "LLMCompass GEMM", "AttAcc PIM", "eager PyTorch"} <= set(df.anchor)


def test_a_table_job_imports_neither_the_plotting_libraries_nor_other_figure_modules():
    """The registry names functions by module (``Ref``) and the figure modules import matplotlib and seaborn
    inside their plotting functions: computing a table loads only its own module."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from adsl.figures.registry import registry\n"
        "spec = registry().tables['fig15b']\n"
        "assert spec.function.__doc__\n"
        "assert 'seaborn' not in sys.modules and 'matplotlib.pyplot' not in sys.modules\n"
        "assert 'adsl.figures.evaluation' in sys.modules and 'adsl.figures.validation' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
