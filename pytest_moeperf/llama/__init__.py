"""llama.cpp's world: builds by number, the llama-server process, llama-bench, server logs,
orphan reaping, the synthetic MoE GGUF."""
