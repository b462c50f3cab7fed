"""Models: the compact GPT (CompactLLM), its tokenizer, loading any model reference (built-in, run, Hub, folder)
quantized or not, the process-wide model cache, CPU int8 and the bitsandbytes CPU-repack guard."""
