"""Peer for bench_v4: transformers DeepseekV4ForCausalLM eager forward + backward (f32).

Usage: deepseek_v4.py config.json batch seq threads reps
Loads the config bench_v4 wrote, builds the model with transformers' random init (eager
attention), fills tid2eid as bench_v4 does (row r: experts (r*k + j) mod E), and times
loss = model(input_ids=ids, labels=ids).loss; loss.backward() on the same token ids.
Prints the best-of-reps seconds of one step on its last line.
"""
import os
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import best_seconds  # noqa: E402


def main():
    path = sys.argv[1]
    batch, seq, threads, reps = (int(x) for x in sys.argv[2:6])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = transformers.DeepseekV4Config.from_json_file(path)
    cfg._attn_implementation = "eager"
    model = transformers.DeepseekV4ForCausalLM(cfg).float().train()
    e, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("tid2eid"):
                rows = torch.arange(b.shape[0]).unsqueeze(1) * k + torch.arange(k).unsqueeze(0)
                b.copy_(rows % e)
    n = batch * seq
    ids = ((torch.arange(n, dtype=torch.int64) * 7919) % cfg.vocab_size).reshape(batch, seq)

    def step():
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()

    print(best_seconds(step, reps))


if __name__ == "__main__":
    main()
