"""Tests for kerasdist.experiments.plots.plot_grouped_bars: grouped bars annotated with speed-ups."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from kerasdist.experiments.plots import plot_grouped_bars  # noqa: E402


def test_bars_are_grouped_and_annotated_with_speed_ups_over_the_first_label():
    figure = plot_grouped_bars(["read", "+ map", "+ cache"], {"alone": [1.2, 0.6, 0.05],
                                                              "with a step": [2.4, 1.3, 1.2]},
                               "seconds per epoch", "Input pipelines", note="best of 2 epochs")
    axis = figure.axes[0]
    assert len(axis.patches) == 6
    heights = sorted(round(patch.get_height(), 2) for patch in axis.patches)
    assert heights == [0.05, 0.6, 1.2, 1.2, 1.3, 2.4]
    texts = [text.get_text() for text in axis.texts]
    assert "0.05\n×24.0" in texts and "0.60\n×2.0" in texts and "1.30\n×1.8" in texts
    assert "1.20" in texts and "2.40" in texts  # the baseline bars carry no speed-up
    assert [t.get_text() for t in axis.get_legend().get_texts()] == ["alone", "with a step"]
    assert any(text.get_text() == "best of 2 epochs" for text in figure.texts)


def test_a_series_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match=r"one value per label \(2\)"):
        plot_grouped_bars(["a", "b"], {"alone": [1.0]}, "s", "t")
