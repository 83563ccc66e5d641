"""ipywidgets explorers, one module each (roofline, tile sizes, online-softmax step-through,
autotuning heatmap). Each module's `explore(...)` returns a widget ready to display."""
