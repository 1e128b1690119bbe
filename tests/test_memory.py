"""harness.memory: the CPU tracker against analytic peaks, saved-tensor agreement, caps,
faults stacked on the tracker, and the meter on a faked accelerator's allocator stats."""


import pytest
import torch

from harness import faults, memory, models
from harness.device import Device

F32 = 4


# ------------------------------------------------------------ analytic peaks (exact)

def test_tracker_matches_analytic_peak_of_allocations_and_frees(cpu):
    with memory.MemoryMeter(cpu) as meter:
        a = torch.empty(1000)                        # 4000
        b = torch.empty(500, dtype=torch.float64)    # 4000 -> 8000 live
        del a                                        # 4000 live
        c = torch.empty(250, dtype=torch.int16)      # 500 -> 4500 live
        assert (meter.peak, meter.current) == (8000, 4500)
        meter.reset()
        assert meter.peak == 4500
        d = torch.zeros(3, 5, dtype=torch.uint8)     # 15
        assert (meter.peak, meter.current) == (4515, 4515)
    del b, c, d
    assert meter.current == 0  # frees after exit still counted


def test_tracker_counts_matmul_output_once_and_ignores_views_and_inplace(cpu):
    m, k, n = 30, 40, 50
    with memory.MemoryMeter(cpu) as meter:
        x, y = torch.randn(m, k), torch.randn(k, n)
        base = meter.current
        assert base == F32 * (m * k + k * n)
        meter.reset()
        z = x @ y
        views = (x.t(), x[0], x.view(-1), z.narrow(0, 0, 3))
        x.add_(1)
        torch.mul(x, 2, out=x)
        assert meter.peak - base == F32 * m * n
        assert meter.current - base == F32 * m * n
    del views, z


def test_tracker_sees_temporaries_of_an_expression(cpu):
    m, k = 64, 48
    x = torch.randn(m, k)                            # alive before: not counted
    with memory.MemoryMeter(cpu) as meter:
        out = (x + 1) * 2                            # temp and result alive at the mul
        assert meter.peak == 2 * F32 * m * k
        assert meter.current == F32 * m * k
    del out


def test_tracker_follows_a_storage_resize(cpu):
    with memory.MemoryMeter(cpu) as meter:
        t = torch.empty(0)
        t.resize_(100)
        assert meter.current == 400 and meter.peak == 400
    del t


# --------------------------------------------------- saved_tensors_hooks agreement

@pytest.mark.parametrize("build", [
    lambda: models.DeepMLP(width=64, depth=4, in_features=32, dropout=0.25),
    lambda: models.SimpleCNN(dropout=0.5),
    lambda: models.resnet("small"),
], ids=["mlp", "cnn", "resnet"])
def test_tracker_agrees_with_saved_tensors_hooks(cpu, build):
    """Live bytes after a forward with autograd minus without = the bytes autograd saved."""
    torch.manual_seed(0)
    model = build().train()
    sample = (32,) if isinstance(model, models.DeepMLP) else (3, 32, 32)
    x = torch.randn(4, *sample)
    target = torch.randint(0, 10, (4,))

    def forward():
        return torch.nn.functional.cross_entropy(model(x), target)

    with torch.no_grad(), memory.MemoryMeter(cpu) as plain:
        kept = forward()
    with memory.MemoryMeter(cpu) as graph:
        with memory.saved_tensor_bytes(exclude=[x, target, *model.parameters(),
                                                *model.buffers()]) as saved:
            loss = forward()
        live = graph.current
    assert saved["bytes"] > 0
    assert live - plain.current == saved["bytes"]
    del kept, loss


# ----------------------------------------------------------------------------- caps

def test_cap_raises_the_devices_oom_error_and_keeps_the_count(cpu):
    meter = memory.MemoryMeter(cpu)
    meter.cap(1000)
    with meter:
        small = torch.empty(200)                     # 800 bytes: fits
        with pytest.raises(cpu.oom_error, match="cap of 1000 bytes"):
            torch.empty(100)                         # 400 more: over the cap
        assert meter.current == 800
        del small
        again = torch.empty(250)                     # 1000: exactly the cap
        assert meter.current == 1000 and meter.peak == 1000
    del again


def test_young_gc_collects_the_blocks_garbage_and_unfreezes_unless_told_to_keep():
    """Inside the block a collection frees the block's cycles; what was alive on entry is
    frozen; on exit it is unfrozen, or kept frozen where the harness session says so
    (Note [Collected objects frozen] in harness/plugin.py)."""
    import gc
    import weakref

    from harness.memory import collect

    class Node:
        pass

    before, setting = gc.get_freeze_count(), collect.keep_frozen(False)
    try:
        for keep in (False, True):
            gc.unfreeze()
            old = Node()
            old.me = old  # a cycle alive on entry
            collect.keep_frozen(keep)
            with memory.young_gc():
                assert gc.get_freeze_count() > 0
                inner = Node()
                inner.me = inner
                gone = weakref.ref(inner)
                del inner
                memory.release()
                assert gone() is None  # the block's garbage: collected
            assert (gc.get_freeze_count() > 0) is keep
            del old
    finally:
        collect.keep_frozen(setting)
        if before:
            gc.freeze()


def test_oom_in_backward_propagates_as_oom_and_memory_comes_back(cpu):
    torch.manual_seed(0)
    model = models.DeepMLP(width=64, depth=4, in_features=64)
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    meter = memory.MemoryMeter(cpu)
    with memory.young_gc(), meter:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        forward_live = meter.current
        meter.cap(forward_live + 100)                # backward needs far more
        with pytest.raises(cpu.oom_error):
            loss.backward()
        del loss
        memory.release()
        assert meter.current == 0
        meter.cap(None)
        torch.nn.functional.cross_entropy(model(x), y).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_max_batch_search_doubles_then_bisects():
    cap, per_sample = 10_000, 37

    def attempt(batch):
        if batch * per_sample > cap:
            raise memory.TORCH_OOM("synthetic")
        return batch * per_sample

    found = memory.max_batch_under_cap(attempt, device=Device("cpu"), start=4)
    assert found.max_batch == cap // per_sample == 270
    assert found.probes[:8] == [4, 8, 16, 32, 64, 128, 256, 512]
    assert found.failed[0] == 512 and not found.hit_limit
    coarse = memory.max_batch_under_cap(attempt, device=Device("cpu"), start=4,
                                        resolution=1 / 16)
    assert 256 <= coarse.max_batch <= 270 and len(coarse.probes) < len(found.probes)


class _DeviceThatKnowsItsOOMs:
    """A device with ``is_out_of_memory`` (as harness/device.py's OOM rows give one):
    older torch_npu raises a plain RuntimeError for an out-of-memory."""

    type = "npu"

    def is_out_of_memory(self, exc):
        return isinstance(exc, memory.TORCH_OOM) or (
            type(exc) is RuntimeError and str(exc).startswith("NPU out of memory"))


def test_is_out_of_memory_asks_the_device_where_it_can():
    npu_style = RuntimeError("NPU out of memory. Tried to allocate 2.00 MiB")
    assert memory.is_out_of_memory(_DeviceThatKnowsItsOOMs(), npu_style)
    assert not memory.is_out_of_memory(_DeviceThatKnowsItsOOMs(), RuntimeError("shape"))
    cpu = Device("cpu")  # with or without Device.is_out_of_memory: a tracker cap is an OOM
    assert memory.is_out_of_memory(cpu, memory.oom_error(cpu)("harness tracker: cap"))
    assert not memory.is_out_of_memory(cpu, RuntimeError("shape mismatch"))


def test_max_batch_search_stops_at_what_the_device_calls_an_oom():
    def attempt(batch):
        if batch > 20:
            raise RuntimeError("NPU out of memory. Tried to allocate 2.00 MiB")
        return batch

    found = memory.max_batch_under_cap(attempt, device=_DeviceThatKnowsItsOOMs(), start=4)
    assert found.max_batch == 20 and found.failed[0] == 32

    def broken(batch):
        raise RuntimeError("not an out-of-memory")

    with pytest.raises(RuntimeError, match="not an out-of-memory"):
        memory.max_batch_under_cap(broken, device=_DeviceThatKnowsItsOOMs(), start=4)


# ------------------------------------------------------------ faults and mode order

def test_hidden_workspace_fault_is_seen_in_the_peak(cpu):
    faults.set_active(["memory.mm_hidden_workspace"])
    from harness.faults.catalog.memory import WORKSPACE_FACTOR

    a, b = torch.randn(16, 8), torch.randn(8, 32)
    with memory.measure(cpu) as meter:
        z = a @ b
    out_bytes = F32 * 16 * 32
    assert meter.peak == out_bytes * (1 + WORKSPACE_FACTOR)
    assert meter.current == out_bytes
    assert torch.equal(z, a @ b)  # numbers unchanged


def test_tracker_and_a_perturbing_fault_both_act(cpu):
    faults.set_active(["example.add_drift"])
    a, b = torch.ones(10), torch.ones(10)
    with memory.measure(cpu) as meter:
        c = a + b
    assert torch.all(c == 2 * (1 + 1e-3))
    # the add's output and the fault's rescaled copy: the tracker saw both
    assert meter.peak == 2 * F32 * 10 and meter.current == F32 * 10


def test_meter_refuses_to_start_inside_the_dut_scope(cpu):
    with cpu.scope(), pytest.raises(RuntimeError, match="outside device.scope"):
        with memory.MemoryMeter(cpu):
            pass


def test_leak_profile_reports_growth_per_step(cpu):
    kept = []
    profile = memory.leak_profile(cpu, lambda: kept.append(torch.empty(250)), warmup=2,
                                  steps=4)
    assert profile.levels == [2000, 3000, 4000, 5000, 6000]
    assert profile.growth_per_step == 1000.0
    assert "storages" in profile.summary


def test_retained_tensor_fault_makes_a_leak(cpu):
    faults.set_active(["memory.retains_tensor_per_step"])
    model = torch.nn.Linear(10, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 10)

    def step():
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    profile = memory.leak_profile(cpu, step, warmup=1, steps=3)
    assert profile.growth_per_step == F32 * (10 * 10 + 10)


def test_checkpoint_fault_removes_the_saving(cpu):
    torch.manual_seed(0)
    model = models.DeepMLP(width=64, depth=6, in_features=64, dropout=0.1)
    x, y = torch.randn(128, 64), torch.randint(0, 10, (128,))
    peaks = {mode: memory.measure_step(cpu, memory.copy_model(model), x, y, checkpoint=mode,
                                       seed=1).peak for mode in memory.CHECKPOINT_MODES}
    assert peaks["non_reentrant"] < 0.7 * peaks["none"]
    faults.set_active(["memory.checkpoint_keeps_activations"])
    faulty = memory.measure_step(cpu, memory.copy_model(model), x, y,
                                 checkpoint="non_reentrant", seed=1).peak
    assert faulty == peaks["none"]


def test_checkpointed_wraps_blocks_and_restores_their_forward():
    model = models.DeepMLP(width=8, depth=3, in_features=8)
    block = model.blocks()[0]
    marker = block.forward  # an instance attribute someone else set
    block.forward = marker
    with memory.checkpointed(model, "reentrant"):
        assert block.forward is not marker
        assert all("forward" in vars(b) for b in model.blocks())
    assert block.forward is marker and "forward" not in vars(model.blocks()[1])
    with pytest.raises(ValueError, match="unknown checkpoint mode"):
        with memory.checkpointed(model, "sometimes"):
            pass


# ------------------------------------------------------------ allocator back end

class _FakeAllocator:
    def __init__(self):
        self.allocated, self.peak, self.calls = 1000, 1000, []


@pytest.fixture
def fake_accelerator(monkeypatch):
    """A Device whose allocator statistics are faked (no accelerator needed)."""
    device = Device("cpu")
    stats = _FakeAllocator()
    monkeypatch.setattr(Device, "has_allocator_stats", property(lambda self: True))
    monkeypatch.setattr(device, "allocated", lambda: stats.allocated)
    monkeypatch.setattr(device, "peak_allocated", lambda: stats.peak)

    def reset_peak():
        stats.calls.append("reset_peak")
        stats.peak = stats.allocated

    monkeypatch.setattr(device, "reset_peak", reset_peak)
    monkeypatch.setattr(device, "cap", lambda n: stats.calls.append(("cap", n)))
    monkeypatch.setattr(device, "empty_cache", lambda: stats.calls.append("empty_cache"))
    monkeypatch.setattr(device, "memory_summary", lambda: "FAKE SUMMARY")
    return device, stats


def test_meter_uses_allocator_stats_on_an_accelerator(fake_accelerator):
    device, stats = fake_accelerator
    meter = memory.MemoryMeter(device)
    assert meter.backend == "allocator"
    meter.cap(5000)
    with meter:
        assert meter.start == 1000 and stats.calls[:1] == ["reset_peak"]
        assert ("cap", 6000) in stats.calls      # the cap is relative to the start
        stats.allocated, stats.peak = 3000, 4500
        torch.empty(10**6)                       # no tracker: torch's CPU bytes ignored
        assert (meter.current, meter.peak) == (2000, 3500)
        meter.reset()
        assert meter.peak == 2000
        assert meter.summary() == "FAKE SUMMARY"
    assert stats.calls[-1] == ("cap", None)      # lifted on exit
