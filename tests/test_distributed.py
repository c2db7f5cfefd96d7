"""distributed=True: two processes on the gloo backend give the single-process loss and gradients (to 1e-6), with the
batch split evenly and unevenly between them; inputs a rank cannot take raise a ValueError on every rank, without a hang.

Each rank holds part of the batch. The mean of the per-rank losses is the whole-batch loss, and each rank's
feature gradient, once DDP divides it by the world size, is the single-process gradient of those features."""
import os, socket, sys, time, warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from cvlc.losses import (SupConLoss, cross_modal_nce, gather_with_grad, multilabel_supcon, nt_xent, scaled_supcon,
                         supcon)

WORLD, N, V, D = 2, 8, 2, 6
SPLITS = {"even": (4, 4), "uneven": (3, 5)}   # samples per rank; the uneven one is a last batch that did not split


def make_data():
    g = torch.Generator().manual_seed(0)
    return {"z": torch.randn(N, V, D, generator=g, dtype=torch.float64),
            "b": torch.randn(N, D, generator=g, dtype=torch.float64),
            "y": torch.randint(0, 3, (N,), generator=g),
            "grp": torch.randint(0, 5, (N,), generator=g),
            "mh": torch.rand(N, 4, generator=g) < 0.4,
            "extra": torch.randn(N, 3, D, generator=g, dtype=torch.float64),
            "w": torch.randn(N, V * D, generator=g, dtype=torch.float64)}


def cases(d, sl, distributed):
    "Each case: a loss of the features `z` (which get the gradient), on the slice `sl` of the batch."
    return {
        "supcon": lambda z: supcon(z, d["y"][sl], 0.2, distributed=distributed),
        "supcon_exclude": lambda z: supcon(z, d["y"][sl], 0.2, exclude_other_positives=True, distributed=distributed),
        "supcon_sum": lambda z: supcon(z, d["y"][sl], 0.2, reduction="sum", distributed=distributed),
        "nt_xent": lambda z: nt_xent(z, 0.5, distributed=distributed),
        "scaled_supcon": lambda z: scaled_supcon(z, d["y"][sl], d["grp"][sl], 20, 0.5, distributed=distributed),
        "scaled_supcon_dynamic": lambda z: scaled_supcon(z, d["y"][sl], d["grp"][sl], 20, 0.5, dynamic=True, distributed=distributed),
        "mlcl": lambda z: multilabel_supcon(z, d["mh"][sl], d["extra"][sl], 0.2, distributed=distributed),
        "cross_modal": lambda z: cross_modal_nce(z[:, 0], d["b"][sl], 0.1, distributed=distributed),
        "cross_modal_one_way": lambda z: cross_modal_nce(z[:, 0], d["b"][sl], 0.1, symmetric=False, distributed=distributed),
        "supcon_chunked": lambda z: supcon(z, d["y"][sl], 0.2, distributed=distributed, chunk_size=3),
        "SupConLoss_module": lambda z: SupConLoss(0.2, distributed=distributed)(z, d["y"][sl]),
        "gather_with_grad": lambda z: (gather_with_grad(z.flatten(1)) * d["w"]).sum() if distributed else (z.flatten(1) * d["w"]).sum(),
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


def _rank_slice(split, rank):
    sizes = SPLITS[split]
    return slice(sum(sizes[:rank]), sum(sizes[:rank + 1]))


def _all_splits(rank, path):
    "Every case on this rank's part of each split, and the warnings raised on the way (none may be a deprecation)."
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = {split: run_cases(make_data(), _rank_slice(split, rank), True) for split in SPLITS}
    out["warnings"] = [str(w.message) for w in caught]
    torch.save(out, f"{path}/rank{rank}.pt")


def _worker(rank, port, path):
    _in_group(rank, port, lambda: _all_splits(rank, path))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def _spawn(fn, args, timeout=120):
    "mp.spawn with a deadline: a rank that hangs (a collective the other rank never joins) fails the test instead."
    ctx = mp.start_processes(fn, args=args, nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive(): p.kill()
            pytest.fail(f"the ranks did not finish within {timeout} s (a hang)")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    path = tmp_path_factory.mktemp("ddp")
    _spawn(_worker, (_free_port(), str(path)))
    return [torch.load(path / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]


@pytest.mark.parametrize("split", list(SPLITS))
@pytest.mark.parametrize("name", list(cases(make_data(), slice(None), False)))
def test_two_processes_match_one(ranks, name, split):
    single = run_cases(make_data(), slice(None), False)[name]
    losses = [r[split][name][0] for r in ranks]
    assert abs(sum(losses) / WORLD - single[0]) < 1e-6 * max(1, abs(single[0])), (losses, single[0])
    grads = torch.cat([r[split][name][1] for r in ranks]) / WORLD   # what DDP's averaging makes of each rank's gradient
    assert torch.allclose(grads, single[1], atol=1e-6, rtol=0), (grads - single[1]).abs().max()


def test_no_deprecated_collectives(ranks):
    "torch.distributed.nn.functional.all_gather and the other deprecated collectives warn; cvlc uses none of them."
    for r, out in enumerate(ranks):
        deprecated = [m for m in out["warnings"] if "deprecat" in m.lower()]
        assert not deprecated, (r, deprecated)


def test_no_distributed_group_means_plain_single_process():
    d = make_data()
    z = d["z"]
    assert torch.allclose(supcon(z, d["y"], 0.2, distributed=True), supcon(z, d["y"], 0.2))


# ---- inputs a rank cannot take: a ValueError on every rank, before any collective that could hang ------------------

def _bad_inputs(rank):
    "Per case, a call that is wrong on one rank only (or where the ranks disagree), as this rank makes it."
    d, n = make_data(), N // WORLD
    z, y = d["z"][rank * n:(rank + 1) * n], d["y"][rank * n:(rank + 1) * n]
    b = d["b"][rank * n:(rank + 1) * n]
    return {
        "labels": lambda: supcon(z, y[:-1] if rank == 1 else y, distributed=True),
        "feature size": lambda: supcon(z[..., :5] if rank == 1 else z, y, distributed=True),
        "dtype": lambda: nt_xent(z.float() if rank == 1 else z, distributed=True),
        "reduction": lambda: supcon(z, y, reduction="none" if rank == 0 else "mean", distributed=True),
        "nt_xent views": lambda: nt_xent(z[:, :1] if rank == 0 else z, distributed=True),
        "multi_hot width": lambda: multilabel_supcon(z, d["mh"][:n, :3] if rank == 1 else d["mh"][:n], distributed=True),
        "multi_hot values": lambda: multilabel_supcon(z, -d["mh"][:n].double() if rank == 1 else d["mh"][:n], distributed=True),
        "extra negatives": lambda: multilabel_supcon(z, d["mh"][:n], d["extra"][:n] if rank == 0 else None, distributed=True),
        "positives": lambda: cross_modal_nce(z[:, 0], b, positives=torch.eye(n, dtype=torch.bool) if rank == 0 else None,
                                             distributed=True),
        "cross_modal shapes": lambda: cross_modal_nce(z[:, 0], b[:-1] if rank == 1 else b, distributed=True),
        "temperature": lambda: cross_modal_nce(z[:, 0], b, 0.0 if rank == 1 else 0.1, distributed=True),
    }


def _error_worker(rank, port, path):
    def work():
        errors = {}
        for name, call in _bad_inputs(rank).items():
            try:
                call()
                errors[name] = "no error"
            except Exception as e:
                errors[name] = f"{type(e).__name__}: {e}"
        d = make_data()   # the group still works afterwards
        errors["after"] = float(supcon(d["z"][rank * 4:(rank + 1) * 4], d["y"][rank * 4:(rank + 1) * 4], distributed=True))
        torch.save(errors, f"{path}/errors{rank}.pt")
    _in_group(rank, port, work)


EXPECTED = {   # case: (what the rank at fault says, what the others say; None: the same on both)
    "labels": ("labels must be a 1-D tensor of 4 entries", "rank(s) [1] of 2 could not take their inputs"),
    "feature size": ("distributed losses need the same feature size on every rank, got [6, 5]", None),
    "dtype": ("distributed losses need the same dtypes (features, extra negatives) on every rank, got ['float64', "
              "'float32']", None),
    "reduction": ("distributed=True needs reduction='mean' or 'sum', got 'none'", "rank(s) [0] of 2"),
    "nt_xent views": ("nt_xent takes exactly 2 views per sample", "rank(s) [0] of 2"),
    "multi_hot width": ("distributed losses need the same number of labels on every rank, got [4, 3]", None),
    "multi_hot values": ("multi_hot must hold only 0 and 1", "rank(s) [1] of 2"),
    "extra negatives": ("got ['float64/float64', 'float64/None'] (by rank)", None),
    "positives": ("positives with distributed=True is not supported", "rank(s) [0] of 2"),
    "cross_modal shapes": ("a and b must have the same shape", "rank(s) [1] of 2"),
    "temperature": ("temperature must be a positive finite number, got 0.0", "rank(s) [1] of 2"),
}
AT_FAULT = {"labels": 1, "reduction": 0, "nt_xent views": 0, "multi_hot values": 1, "positives": 0,
            "cross_modal shapes": 1, "temperature": 1}


@pytest.fixture(scope="module")
def rank_errors(tmp_path_factory):
    path = tmp_path_factory.mktemp("ddp_errors")
    _spawn(_error_worker, (_free_port(), str(path)))
    return [torch.load(path / f"errors{r}.pt", weights_only=True) for r in range(WORLD)]


@pytest.mark.parametrize("case", list(EXPECTED))
def test_bad_input_on_one_rank_raises_on_every_rank(rank_errors, case):
    own, other = EXPECTED[case]
    for r in range(WORLD):
        msg = rank_errors[r][case]
        want = own if other is None or r == AT_FAULT[case] else other
        assert msg.startswith("ValueError: ") and want in msg, (r, msg)


def test_group_still_works_after_the_errors(rank_errors):
    d = make_data()
    whole = supcon(d["z"], d["y"], distributed=False).item()
    assert abs(sum(r["after"] for r in rank_errors) / WORLD - whole) < 1e-6


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
