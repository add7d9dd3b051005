"""Paper mode: the paper's own configuration, its unstated constants calibrated to the training figures
(``config/paper.yaml``, docs/reproduction.md)."""
