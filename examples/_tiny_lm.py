"""The Hugging Face examples' model and data: a 2-layer GPT-2 built from a config (nothing is
downloaded) and random token sequences from a fixed seed."""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel

VOCAB = 128
SEQUENCE = 32


def tiny_gpt2(seed: int = 0) -> GPT2LMHeadModel:
    """The same small GPT-2 (30k parameters in 28 tensors) for the same ``seed``."""
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=SEQUENCE,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(config)


def token_sequences(count: int, seed: int = 0) -> torch.Tensor:
    """``count`` sequences of ``SEQUENCE`` random token ids."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (count, SEQUENCE), generator=generator)
