"""Built-in workloads: torch models and their data, generated on the fly.

These modules import torch at the top (they define ``nn.Module`` classes), so they are imported
only where torch is needed: in a trial, a benchmark or a test, never by the CLI at start-up.
"""
