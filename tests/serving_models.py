"""The tiny real model tests run llama-server with; made by the product's
own maker, which `make demo` uses too."""

from llmgw.simulator.tiny_model import make_tiny_gguf

__all__ = ["make_tiny_gguf"]
