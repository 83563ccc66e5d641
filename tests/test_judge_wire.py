"""The judge's calls into a student's notebook (grader.grading.judge over grader.runtime.serve,
grader.runtime.wire): the student's side answers from a process forked from this one over a
socket pair, as the kernel does at grading. What crosses is data: tensors come back with what
the student's code wrote in them, values as plain data, failures as the course's own errors; and
nothing the student's side sends is run or believed beyond its shape."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from grader.runtime import device, integrity, launches, serve, wire
from grader.runtime.checks import KernelCheckError
from grader.runtime.stubs import StubNotFilled
from tests.served import Served

DEVICE = device.setup()


@pytest.fixture
def served():
    made = []

    def serve_namespace(namespace, **options):
        made.append(Served(namespace, **options))
        return made[-1]

    yield serve_namespace
    for s in made:
        s.close()


def test_a_call_writes_into_the_judges_tensor(served):
    def relu(x, out):
        out.copy_(x.clamp(min=0))

    s = served({"relu": relu})
    x = torch.randn(100)
    out = torch.full((100,), float("nan"))
    s.proxy("relu")(x, out)
    assert torch.equal(out, x.clamp(min=0))


def test_views_share_their_storage_on_both_sides(served):
    def write_into(t):
        t.fill_(7.0)

    s = served({"write_into": write_into})
    buffer = torch.zeros(10)
    s.proxy("write_into")(buffer[2:5])
    assert buffer.tolist() == [0, 0, 7, 7, 7, 0, 0, 0, 0, 0]
    grid = torch.zeros(4, 6)
    s.proxy("write_into")(grid.t()[1])  # a strided view: column 1
    assert grid[:, 1].tolist() == [7, 7, 7, 7] and grid.sum() == 28


def test_values_come_back_as_data(served):
    s = served(
        {
            "answer": {"B", "C"},
            "config": {"n": (1, 2.5, float("inf"), None), "dtype": torch.bfloat16},
            "made": lambda: (torch.arange(6).reshape(2, 3), "text", [1, 2]),
        }
    )
    assert s.proxy("answer") == {"B", "C"}
    assert s.proxy("config") == {"n": (1, 2.5, float("inf"), None), "dtype": torch.bfloat16}
    t, text, items = s.proxy("made")()
    assert torch.equal(t, torch.arange(6).reshape(2, 3)) and text == "text" and items == [1, 2]


def test_something_that_is_not_data_is_opaque(served):
    class Mine:
        pass

    s = served({"mine": Mine(), "returns_one": lambda: Mine()})
    assert s.proxy("mine")["kind"] == "opaque"
    assert isinstance(s.proxy("returns_one")(), wire.Opaque)


def test_failures_come_back_as_the_courses_errors(served):
    def stub():
        # YOUR CODE HERE
        raise NotImplementedError()

    def wrong():
        raise KernelCheckError("`out` is wrong at 3 of 10 elements")

    def plain():
        raise ValueError("no such block size")

    s = served({"stub": stub, "wrong": wrong, "plain": plain})
    with pytest.raises(StubNotFilled, match="still holds the exercise stub"):
        s.proxy("stub")()
    with pytest.raises(KernelCheckError, match="wrong at 3 of 10"):
        s.proxy("wrong")()
    with pytest.raises(ValueError, match="no such block size"):
        s.proxy("plain")()


def test_the_judges_watches_see_what_happened_there(served):
    def computes_with_torch(x, out):
        out.copy_(torch.softmax(x, dim=-1))

    s = served({"f": computes_with_torch})
    x = torch.randn(4, 8)
    with pytest.raises(launches.IntegrityError, match="softmax"):
        with integrity.forbid(["softmax"], why="compute it with your kernel"):
            s.proxy("f")(x, torch.empty_like(x))


def test_a_launch_recorded_there_names_the_judges_tensors(served):
    from tests import kernels

    s = served({"relu_kernel": kernels.relu_kernel, "relu_no_store": kernels.relu_no_store})
    x = torch.randn(300)
    out = torch.full((300,), float("nan"))
    with launches.kernel_work(["relu_kernel"], (x,), out, "the launcher") as rec:
        s.proxy("relu_kernel")[(3,)](x, out, 300, BLOCK=128)
    assert torch.equal(out, x.clamp(min=0))
    (launch,) = rec.launches
    assert launch.kernel == "relu_kernel" and launches.Span.of(x) in launch.spans
    with pytest.raises(launches.IntegrityError, match="returned without launching relu_kernel"):
        with launches.kernel_work(["relu_kernel"], (x,), out, "the launcher"):
            s.proxy("relu_no_store")[(3,)](x, out, 300, BLOCK=128)
    with pytest.raises(launches.IntegrityError, match="did not write"):
        with launches.kernel_work(["relu_kernel"], (x,), out, "the launcher"):
            s.proxy("relu_kernel")[(3,)](x, out, 300, BLOCK=128)
            out.add_(1.0)  # written here, after the kernel


def test_settings_of_the_release_reach_the_call(served):
    namespace = {"LIMIT": 1}
    namespace["limit"] = lambda: namespace["LIMIT"]
    current = {"LIMIT": 5}
    s = served(namespace, settings=lambda: dict(current))
    assert s.proxy("limit")() == 5


@pytest.mark.parametrize(
    "spec",
    [
        {"storage": 1, "offset": 0, "shape": [100], "stride": [1], "dtype": "float32"},
        {"storage": 1, "offset": -1, "shape": [2], "stride": [1], "dtype": "float32"},
        {"storage": 1, "offset": 0, "shape": [2], "stride": [1], "dtype": "os.system"},
    ],
)
def test_a_view_outside_its_storage_is_refused(spec):
    storage = torch.zeros(10).untyped_storage()
    with pytest.raises(wire.WireError):
        wire.view(storage, wire.dtype_named(spec["dtype"]), spec["offset"], spec["shape"],
                  spec["stride"])  # fmt: skip


def test_records_of_other_modules_are_refused():
    codec = wire.Codec()
    with pytest.raises(wire.WireError):
        codec.decode({"record": ["subprocess.CompletedProcess", {"dict": []}]})
    with pytest.raises(wire.WireError):
        codec.decode({"record": ["grader.runtime.wire.os", {"dict": []}]})


def test_a_timed_call_draws_the_inputs_the_judge_draws_from_its_seed(served):
    """A speed cell's timed call: the kept call made again on inputs drawn there from the judge's
    seed; the output fetched here is right for the inputs drawn here from the same seed."""
    from grader.runtime import perf

    def relu(x, out):
        torch.clamp(x, min=0, out=out)

    s = served({"relu": relu})
    x, out = torch.randn(1000), torch.empty(1000)
    with s.session.tracing() as kept:
        s.proxy("relu")(x, out)
    assert kept == ["relu"]
    moments = [(0.0, 1.0)]
    for seed in (1, 2):
        s.session.timed([x], moments, seed, marker=4097)
        s.session.fetch(out)  # the output of that call, as computed there
        generator = torch.Generator()
        generator.manual_seed(seed)
        perf.draw([x], moments, generator)  # the same inputs, drawn here
        assert torch.equal(out, x.clamp(min=0))


def test_a_timed_output_that_is_returned_lands_in_what_the_last_call_returned(served):
    """08's speed case returns its output and its check reads the last call's: the judge fetches
    each timed call's output into the tensor its last request returned (the checked call's, made
    after the kept one), so the check reads the output of the timed call."""
    from grader.runtime import perf

    s = served({"relu": lambda x: x.clamp(min=0)})
    x, result = torch.randn(1000), []

    def run():
        result[:] = [s.proxy("relu")(x)]

    with s.session.tracing():
        run()
    run()  # the checked call: a new tensor in `result`
    assert s.session.last_result is result[0]
    moments = [(0.0, 1.0)]
    s.session.timed([x], moments, seed=3, marker=4097)
    s.session.fetch(s.session.last_result, result=True)
    generator = torch.Generator()
    generator.manual_seed(3)
    perf.draw([x], moments, generator)
    assert torch.equal(result[0], x.clamp(min=0))


def test_only_what_changed_crosses_again(served, monkeypatch):
    """A storage whose bytes the student's side already holds is not sent again, and one the
    call left alone does not come back; a storage the judge changed goes again, and so does one
    a failed call may have half written."""

    def relu(x, out):
        if x[0] < -100:
            out.fill_(1.0)
            raise ValueError("x[0] is too small")
        out.copy_(x.clamp(min=0))

    s = served({"relu": relu})
    sent, back = [], []
    real_send, real_receive = wire.send, wire.receive

    def send(sock, header, blobs=()):
        sent.append(sum(memoryview(b).nbytes for b in blobs))
        real_send(sock, header, blobs)

    def receive(sock, landing=None):
        header, blobs = real_receive(sock, landing)
        back.append(sum(len(b) for b in blobs))
        return header, blobs

    monkeypatch.setattr(wire, "send", send)
    monkeypatch.setattr(wire, "receive", receive)
    x, out = torch.randn(1000), torch.full((1000,), float("nan"))
    relu = s.proxy("relu")
    relu(x, out)
    assert (sent[-1], back[-1]) == (8000, 4000)  # x and out there, out back
    relu(x, out)
    assert (sent[-1], back[-1]) == (0, 0)  # the same bytes on both sides: nothing crosses
    x.neg_()
    relu(x, out)
    assert (sent[-1], back[-1]) == (4000, 4000)
    assert torch.equal(out, x.clamp(min=0))
    x[0] = -1000.0
    with pytest.raises(ValueError, match="too small"):
        relu(x, out)
    x[0] = 1.0
    relu(x, out)
    assert sent[-1] == 8000  # out as the judge holds it, not as the failed call left it
    assert torch.equal(out, x.clamp(min=0))


def test_the_bytes_a_side_keeps_are_not_the_memory_messages_land_in(served):
    """Each side reads a message's blobs into memory it reuses (wire.Landing), and the student's
    side copies a mirror there to compare it: the bytes it keeps of each mirror must be a copy,
    or a write into the first tensor sent would compare equal to itself and never come back."""

    def fill(out, x):
        out.copy_(x)

    s = served({"fill": fill})
    out, x = torch.zeros(1000), torch.randn(1000)
    s.proxy("fill")(out, x)
    assert torch.equal(out, x)


def test_a_landing_reuses_each_slot():
    landing = wire.Landing()
    first = landing(0, 16)
    first[:] = bytes(range(16))
    assert bytes(landing(0, 8)) == bytes(range(8))  # the same memory, smaller
    assert len(landing(1, 4)) == 4 and bytes(landing(0, 16)) == bytes(range(16))
    assert len(landing(0, 32)) == 32  # larger: new memory


class _Ops(TorchDispatchMode):
    """The torch operators run while `on`."""

    def __init__(self):
        super().__init__()
        self.ops, self.on = set(), True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.on:
            self.ops.add(str(func).split(".")[1])
        return func(*args, **(kwargs or {}))


def _serve_recording(sock, namespace, found):
    ops = _Ops()

    def paused(fn):
        def call(*args, **kwargs):
            ops.on = False
            try:
                return fn(*args, **kwargs)
            finally:
                ops.on = True

        return call

    with ops:
        serve.Server(sock, {n: paused(f) for n, f in namespace.items()}).run()
    found.put(sorted(ops.ops))


def test_the_serving_side_runs_no_operator_but_copies_of_its_own():
    """On a GPU the judge reads every kernel the student's process ran inside a call from the
    activity log, so serving a call (mirroring, finding what changed, sending it back) may copy
    and allocate but not compute: a comparison there would show as a kernel that is not the
    exercise's, and flag an honest student."""

    def relu(x, out):
        out.copy_(x.clamp(min=0))

    found = multiprocessing.get_context("fork").Queue()
    s = Served({"relu": relu}, serving=lambda sock, ns: _serve_recording(sock, ns, found))
    proxy = s.proxy("relu")
    x, out = torch.randn(100), torch.empty(100)
    for _ in range(2):
        proxy(x, out)
    x.neg_()
    proxy(x, out)
    assert torch.equal(out, x.clamp(min=0))
    s.close()
    ops = found.get(timeout=30)
    assert ops and set(ops) <= {"copy_", "detach", "empty", "set_", "_to_copy", "lift_fresh"}, ops


def test_a_measurement_is_kept_for_the_next_cell_alone_and_only_for_the_same_call():
    from types import SimpleNamespace

    from grader.grading.judge import Kept

    x, out = torch.ones(4), torch.empty(4)

    def fused():
        pass

    def verify():
        pass

    def case(candidate=fused, inputs=(x,), out=out, kernels=("fused_kernel",)):
        return SimpleNamespace(candidate=candidate, inputs=inputs, out=out, verify=verify,
                               kernels=[k.upper().lower() for k in kernels])  # fmt: skip

    measured_in = SimpleNamespace(calls=7)
    kept = Kept(Kept.of(case()), "timing", (), (), 4, measured_in, measured_in.calls)
    fresh = SimpleNamespace(calls=0)
    assert kept.holds(case(), 5, fresh)  # the kernel's name an equal string: the same call
    assert not kept.holds(case(), 6, fresh)  # a cell ran between: the kernel's state may differ
    assert not kept.holds(case(), 5, SimpleNamespace(calls=1))  # this cell called it first
    assert not kept.holds(case(inputs=(x.clone(),)), 5, fresh)  # other tensors
    assert not kept.holds(case(out=None), 5, fresh)
    assert not kept.holds(case(candidate=verify), 5, fresh)
    assert not kept.holds(case(kernels=("other_kernel",)), 5, fresh)
    measured_in.calls += 1  # the cell that measured it called the kernel again afterwards
    assert not kept.holds(case(), 5, fresh)


def test_a_case_built_again_by_the_same_function_is_the_same_call():
    """03's speed cells each build their case by one function whose lambda reads globals: two
    lambdas of one code over the same objects are one call; over other objects, not."""
    from types import SimpleNamespace

    from grader.grading.judge import Kept

    x, out = torch.ones(4), torch.empty(4)

    def build(tensor, scale=1.0):
        return SimpleNamespace(candidate=lambda: (tensor, scale, out), inputs=(x,), out=out,
                               verify=None, kernels=["softmax_kernel"])  # fmt: skip

    def other(tensor, scale=1.0):
        return SimpleNamespace(candidate=lambda: (tensor, scale, out), inputs=(x,), out=out,
                               verify=None, kernels=["softmax_kernel"])  # fmt: skip

    session = SimpleNamespace(calls=0)
    kept = Kept(Kept.of(build(x)), "timing", (), (), 4, session, 0)
    assert build(x).candidate is not build(x).candidate
    assert kept.holds(build(x), 5, SimpleNamespace(calls=0))
    assert not kept.holds(build(x.clone()), 5, SimpleNamespace(calls=0))  # another tensor
    # an equal number, another object: identity is what is compared
    assert not kept.holds(build(x, scale=float("1.0")), 5, SimpleNamespace(calls=0))
    assert not kept.holds(other(x), 5, SimpleNamespace(calls=0))  # other code
