"""Data: rows from files and Hub datasets, format detection and column mapping, chat templating with prompt
masking, chunking, the eval split, packing, curriculum ordering and the data preview. Takes a tokenizer; never
loads models."""
