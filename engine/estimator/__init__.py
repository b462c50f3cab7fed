"""The memory estimator: model architectures counted on the meta device, the memory terms and verdicts, the
model catalog (presets/ as data), hardware recipes, and the hand-off of settings between panels. It reads
presets as data and never imports the model code that trains or generates."""
