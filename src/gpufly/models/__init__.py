"""Model specs from presets, Hugging Face config.json files, GGUF files and PyTorch factories."""
