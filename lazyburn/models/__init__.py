"""Pretrained models built on lazyburn.nn: ``minilm`` (all-MiniLM-L6-v2 sentence embeddings)
over the BERT encoder of ``bert``, and ``resnet`` (ResNet-18/34/50 image classifiers with
torchvision's parameter names)."""
