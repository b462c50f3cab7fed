"""Inference: streaming generation, batch generation, evaluation (perplexity) and the scored date task."""
