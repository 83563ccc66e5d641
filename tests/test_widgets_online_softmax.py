"""The online-softmax step-through: its states are the exact running max and sum, and the
widget builds and redraws."""

import math

import matplotlib
import numpy as np
import pytest

from grader.runtime.widgets import online_softmax as ow

matplotlib.use("Agg")


def softmax(x):
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


@pytest.mark.parametrize("chunk", [1, 3, 7, 40, 100])
def test_final_state_is_the_softmax(chunk):
    x = np.random.default_rng(chunk).normal(size=40) * 3
    states = ow.steps(x, chunk)
    assert len(states) == math.ceil(40 / chunk)
    last = states[-1]
    assert last.stop == 40
    assert last.m == x.max()
    assert np.isclose(last.d, np.exp(x - x.max()).sum(), rtol=1e-12)
    np.testing.assert_allclose(last.partial, softmax(x), rtol=1e-12)


def test_each_step_is_the_state_of_its_prefix():
    x = np.array([0.5, -1.0, 2.0, 1.0, 4.0, -3.0, 0.0])
    for step in ow.steps(x, 2):
        prefix = x[: step.stop]
        assert step.m == prefix.max()
        assert np.isclose(step.d, np.exp(prefix - prefix.max()).sum(), rtol=1e-12)
        np.testing.assert_allclose(step.partial[: step.stop], softmax(prefix), rtol=1e-12)
        assert np.isnan(step.partial[step.stop :]).all()


def test_alpha_rescales_only_when_the_maximum_grows():
    x = np.array([1.0, 0.0, 3.0, 2.0, 2.5, -1.0])  # chunk maxima 1, 3, 2.5
    states = ow.steps(x, 2)
    assert states[0].alpha == 0.0  # nothing to rescale before the first chunk
    assert np.isclose(states[1].alpha, math.exp(1.0 - 3.0))
    assert states[2].alpha == 1.0
    assert [s.m for s in states] == [1.0, 3.0, 3.0]


def test_minus_infinity_chunks_give_no_nan():
    x = np.array([-np.inf, -np.inf, -np.inf, 2.0, -np.inf, 1.0])
    states = ow.steps(x, 2)
    assert states[0].m == -np.inf and states[0].d == 0.0 and states[0].alpha == 0.0
    assert np.isnan(states[0].partial).all()  # nothing finite seen: no softmax yet
    assert states[1].m == 2.0 and np.isclose(states[1].d, 1.0)
    np.testing.assert_allclose(states[-1].partial, softmax(x))
    assert not any(np.isnan(s.d) or np.isnan(s.alpha) for s in states)


def test_huge_magnitudes_do_not_overflow():
    x = np.array([1e4, -1e4, 1e4 - 1.0, 5e3])
    last = ow.steps(x, 1)[-1]
    assert np.isfinite(last.d)
    np.testing.assert_allclose(last.partial, softmax(x))


@pytest.mark.parametrize(
    "row, chunk", [([1.0, 2.0], 0), ([], 2), ([1.0, np.nan], 1), ([1.0, np.inf], 1)]
)
def test_bad_arguments_are_refused(row, chunk):
    with pytest.raises(ValueError):
        ow.steps(row, chunk)


def test_describe_names_the_state():
    line = ow.describe(ow.steps([0.0, 1.0, 5.0], 1)[2])
    assert "m = 5" in line and "the maximum grew" in line


def test_explore_builds_a_slider_over_the_chunks():
    box = ow.explore(np.arange(10.0), 3)
    slider, text, _ = box.children
    assert (slider.min, slider.max) == (0, 3)
    slider.value = 3  # redraws without error
    assert "chunk 3" in text.value and "m = 9" in text.value


def test_legend_swatches_match_their_bars():
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    row = np.array([0.5, 2.0, -1.0, 3.0, 0.0, 1.0])
    expected = {"seen": "C0", "not yet read": "lightgray"}
    for index in range(len(ow.steps(row, 2))):
        left, _ = ow.draw(row, 2, index)
        legend = left.get_legend()
        shown = {t.get_text(): h for t, h in zip(legend.texts, legend.legend_handles, strict=True)}
        last = index == len(ow.steps(row, 2)) - 1
        assert ("not yet read" in shown) != last, f"after chunk {index}"
        for label, color in expected.items():
            if label in shown:
                assert shown[label].get_facecolor() == to_rgba(color), f"{label}, chunk {index}"
        plt.close("all")
