"""Pretrained models built on lazyburn.nn: ``minilm`` (all-MiniLM-L6-v2 sentence embeddings)
over the BERT encoder of ``bert``."""
