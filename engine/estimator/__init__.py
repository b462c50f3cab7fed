"""The memory estimator: model references resolved to exactly counted architectures (on the meta device; built-in
presets from their numbers), the memory terms and verdicts, the model catalog (presets/ as data), hardware
recipes, and the hand-off of settings between panels. It reads presets as data and never imports the model code
that trains or generates."""
