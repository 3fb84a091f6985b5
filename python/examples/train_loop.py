"""A hand-written training loop over the pieces `hp train` uses: the default config's model, its
data loader and optimizer, the learning-rate schedule and clipping, plus a custom loss term.

    python python/examples/train_loop.py [--steps N] [--l2 WEIGHT] [--resume DIR] [--save DIR]
                                         [key=value ...]

With --l2 0 (the default) the losses equal `hp train configs/default.yaml`'s bit for bit
(training.mixed_precision=f32); a positive weight adds WEIGHT * mean(embedding²) to the loss.
--save DIR checkpoints the state after the last step into DIR as `hp train` does; --resume DIR
continues from DIR's latest checkpoint (one of --save or of `hp train`), bit for bit.
"""
import argparse
import sys

import hyperparallel as hp


def train_loop(config="configs/default.yaml", overrides=(), l2=0.0, steps=None, log=print,
               resume=None, save=None):
    cfg = hp.load_config(config, overrides)
    model = hp.build_model(cfg)  # seeded by training.seed, as hp train builds it
    opt = hp.Optimizer.from_config(model.named_parameters(), cfg)
    loader = hp.DataLoader.from_config(cfg)
    embedding = dict(model.named_parameters())["model.embed_tokens.weight"]
    first = hp.load_checkpoint(resume, model, opt, loader)["step"] + 1 if resume else 1
    losses = []
    for step in range(first, (steps or cfg.steps) + 1):
        opt.zero_grad()
        batch = loader.next(cfg.batch_size)
        loss = model.loss(batch["ids"], batch["labels"])
        total = loss + l2 * hp.mean(hp.square(embedding)) if l2 else loss
        total.backward()
        norm = hp.grad_norm(opt.parameters())
        opt.step(cfg.lr(step), hp.clip_factor(norm, cfg.grad_clip))
        losses.append(loss.item())
        log(f"step {step}: loss {losses[-1]:.4f} grad_norm {norm:.3f} lr {cfg.lr(step):.2e}")
    if save:
        hp.save_checkpoint(save, model, opt, step=steps or cfg.steps, loader=loader, config=cfg)
    return losses


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int)
    ap.add_argument("--l2", type=float, default=0.0)
    ap.add_argument("--resume")
    ap.add_argument("--save")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    train_loop(overrides=args.overrides, l2=args.l2, steps=args.steps, resume=args.resume,
               save=args.save)
    sys.exit(0)
