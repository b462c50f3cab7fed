"""Export: merging an adapter into its base, the run zip, ONNX export, and pushing a run to the Hugging Face Hub."""
