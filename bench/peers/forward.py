"""Peer for bench_forward: transformers Qwen3ForCausalLM eager forward (f32, no grad).

Usage: forward.py hidden layers heads kv_heads intermediate vocab seq threads
Prints the best-of-reps seconds for one forward of [1, seq] tokens on its last line.
"""
import sys
import time

import torch
import transformers as tf


def main():
    hidden, layers, heads, kv, inter, vocab, seq, threads = (int(x) for x in sys.argv[1:9])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = tf.Qwen3Config(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv, head_dim=hidden // heads, intermediate_size=inter,
                         vocab_size=vocab, max_position_embeddings=max(seq, 2048),
                         attn_implementation="sdpa")
    model = tf.Qwen3ForCausalLM(cfg).float().eval()
    ids = torch.randint(0, vocab, (1, seq))
    with torch.inference_mode():
        model(input_ids=ids, use_cache=False)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            model(input_ids=ids, use_cache=False)
            best = min(best, time.perf_counter() - t0)
    print(best)


if __name__ == "__main__":
    main()
