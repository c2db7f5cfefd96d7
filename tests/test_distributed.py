"""distributed=True: two processes on the gloo backend give the single-process loss and gradients (to 1e-6).

Each rank holds half of the batch. The mean of the per-rank losses is the whole-batch loss, and each rank's
feature gradient, once DDP divides it by the world size, is the single-process gradient of those features."""
import os, socket, sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from cvlc.losses import cross_modal_nce, multilabel_supcon, nt_xent, scaled_supcon, supcon

WORLD, N, V, D = 2, 8, 2, 6


def make_data():
    g = torch.Generator().manual_seed(0)
    return {"z": torch.randn(N, V, D, generator=g, dtype=torch.float64),
            "b": torch.randn(N, D, generator=g, dtype=torch.float64),
            "y": torch.randint(0, 3, (N,), generator=g),
            "grp": torch.randint(0, 5, (N,), generator=g),
            "mh": torch.rand(N, 4, generator=g) < 0.4,
            "extra": torch.randn(N, 3, D, generator=g, dtype=torch.float64)}


def cases(d, sl, distributed):
    "Each case: a loss of the features `z` (which get the gradient), on the slice `sl` of the batch."
    return {
        "supcon": lambda z: supcon(z, d["y"][sl], 0.2, distributed=distributed),
        "supcon_exclude": lambda z: supcon(z, d["y"][sl], 0.2, exclude_other_positives=True, distributed=distributed),
        "nt_xent": lambda z: nt_xent(z, 0.5, distributed=distributed),
        "scaled_supcon": lambda z: scaled_supcon(z, d["y"][sl], d["grp"][sl], 20, 0.5, distributed=distributed),
        "scaled_supcon_dynamic": lambda z: scaled_supcon(z, d["y"][sl], d["grp"][sl], 20, 0.5, dynamic=True, distributed=distributed),
        "mlcl": lambda z: multilabel_supcon(z, d["mh"][sl], d["extra"][sl], 0.2, distributed=distributed),
        "cross_modal": lambda z: cross_modal_nce(z[:, 0], d["b"][sl], 0.1, distributed=distributed),
        "supcon_chunked": lambda z: supcon(z, d["y"][sl], 0.2, distributed=distributed, chunk_size=3),
    }


def run_cases(d, sl, distributed):
    out = {}
    for name, fn in cases(d, sl, distributed).items():
        z = d["z"][sl].clone().requires_grad_()
        loss = fn(z)
        loss.backward()
        out[name] = (loss.item(), z.grad.clone())
    return out


def _in_group(rank, port, work):
    """Run `work()` as `rank` of a gloo group of WORLD processes. Once every rank is done (the barrier), the process ends
    at once, without tearing gloo down: its threads, destroyed at interpreter exit, now and then abort the process
    ("terminate called without an active exception", SIGABRT) after the results are saved."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        work()
        dist.barrier()      # no rank leaves while the other still talks to it
    except BaseException:
        dist.destroy_process_group()
        raise
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)


def _worker(rank, port, path):
    n = N // WORLD
    _in_group(rank, port, lambda: torch.save(run_cases(make_data(), slice(rank * n, (rank + 1) * n), True),
                                             f"{path}/rank{rank}.pt"))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    path = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(_free_port(), str(path)), nprocs=WORLD, join=True)
    return [torch.load(path / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]


@pytest.mark.parametrize("name", list(cases(make_data(), slice(None), False)))
def test_two_processes_match_one(ranks, name):
    single = run_cases(make_data(), slice(None), False)[name]
    losses = [r[name][0] for r in ranks]
    assert abs(sum(losses) / WORLD - single[0]) < 1e-6, (losses, single[0])
    grads = torch.cat([r[name][1] for r in ranks]) / WORLD   # what DDP's averaging makes of each rank's gradient
    assert torch.allclose(grads, single[1], atol=1e-6, rtol=0), (grads - single[1]).abs().max()


def test_no_distributed_group_means_plain_single_process():
    d = make_data()
    z = d["z"]
    assert torch.allclose(supcon(z, d["y"], 0.2, distributed=True), supcon(z, d["y"], 0.2))


# ---- a training step of cvlc.training under DDP equals the single-process step ------------------------------

STEP_BATCH = 8


def _step_data():
    g = torch.Generator().manual_seed(1)
    return [{"views": torch.rand(STEP_BATCH, 2, 3, 16, 16, generator=g)} for _ in range(2)]   # two steps of 8 image pairs


def _trained_params(distributed: bool):
    "Two SGD steps of a small visual stream with NT-Xent through cvlc.training; the parameters afterwards."
    from fastai.optimizer import SGD
    from cvlc.models import ProjectionHead, VisualStream
    from cvlc.training import DistributedTrainer, make_learner

    class SimCLRNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.f, self.g = VisualStream(16, (8, 16), (2, 2), heads=2, grid=8), ProjectionHead(16, 16, 8)
        def forward(self, b):
            v = b["views"]
            return self.g(self.f(v.flatten(0, 1))).reshape(len(v), 2, -1)

    torch.manual_seed(0)
    model = SimCLRNet()                  # float32: fastai's Recorder smooths the loss in float32
    data = _step_data()
    loss = lambda z, b: nt_xent(z, 0.5, distributed=distributed)
    cbs = [DistributedTrainer()] if distributed else []
    learn = make_learner(model, data, None, loss, lr=0.5, opt_func=SGD, cbs=cbs)   # SGD: a parameter moves by lr x its gradient
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    return {k: v.detach().clone() for k, v in learn.model.state_dict().items()}


def _step_worker(rank, port, path):
    _in_group(rank, port, lambda: torch.save(_trained_params(True), f"{path}/step{rank}.pt"))


def test_ddp_training_steps_equal_one_process(tmp_path):
    mp.spawn(_step_worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    single = _trained_params(False)
    for r in range(WORLD):
        ranked = torch.load(tmp_path / f"step{r}.pt", weights_only=True)
        for k, v in single.items():
            assert torch.allclose(ranked[k], v, atol=1e-6, rtol=0), (r, k, (ranked[k] - v).abs().max())
    assert any(not torch.equal(v, w) for v, w in zip(single.values(), _initial_params().values())), "the parameters did not move"


def _initial_params():
    from cvlc.models import ProjectionHead, VisualStream
    torch.manual_seed(0)
    f, g = VisualStream(16, (8, 16), (2, 2), heads=2, grid=8), ProjectionHead(16, 16, 8)
    return {**{f"f.{k}": v for k, v in f.state_dict().items()}, **{f"g.{k}": v for k, v in g.state_dict().items()}}


# ---- the SimCLR chapter's script under torchrun ------------------------------------------------------------------

def test_torchrun_simclr_equals_one_process(tmp_path):
    "`torchrun --nproc_per_node 2 -m cvlc.simclr` ends with the encoder `python -m cvlc.simclr` trains alone."
    import subprocess, sys
    from pathlib import Path
    from cvlc.simclr import load_encoder
    # plain SGD: a parameter moves by lr x its gradient, so float32 summation order cannot be amplified (Adam would)
    args = ["--images", "64", "--epochs", "1", "--batch", "16", "--dim", "16", "--seed", "3", "--optimizer", "sgd", "--lr", "0.5"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    bin_ = Path(sys.executable).parent
    one = subprocess.run([sys.executable, "-m", "cvlc.simclr", *args, "--out", str(tmp_path / "one")], capture_output=True, text=True, env=env, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([str(bin_ / "torchrun"), "--nproc_per_node", "2", "--master_port", str(_free_port()), "-m", "cvlc.simclr", *args,
                          "--out", str(tmp_path / "two")], capture_output=True, text=True, env=env, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    assert "2 process(es)" in two.stdout and "1 process(es)" in one.stdout
    a, b = load_encoder(tmp_path / "one" / "simclr_encoder.pt"), load_encoder(tmp_path / "two" / "simclr_encoder.pt")
    diffs = {k: (v - b.state_dict()[k]).abs().max().item() for k, v in a.state_dict().items()}
    assert max(diffs.values()) < 1e-5, sorted(diffs.items(), key=lambda kv: -kv[1])[:3]
