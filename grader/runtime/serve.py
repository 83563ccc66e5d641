"""The student's side of grading: before each cell the judge runs, the notebook's kernel runs
`serve(path)`, which connects to the judge's socket and answers each message until `end`:

- `describe`: what each name asked about is in the notebook: a Triton kernel, a function, a
  value (sent as data, grader.runtime.wire) or missing;
- `call` and `launch`: call a function, or launch a kernel on a grid, with the judge's
  arguments. The judge's tensors arrive as storages mirrored on this process's device (until a
  message `release`s them; a storage the judge did not change since comes as `same`), and
  those the call changed go back afterwards; the judge's open watches
  (grader.runtime.watches) are opened around the call here too, and report what they saw;
- for a speed cell: requests marked `trace` are kept; `timed` draws the inputs from the judge's
  seed, flushes the L2 cache with a fill of the judge's size and makes the kept call again;
  `fetch` sends a tensor's bytes. The judge reads what ran, and how long, from the GPU's own
  activity log (grader/grading/activity.c), not from here.

Nothing here decides a score: the judge draws the inputs, computes the expected outputs and
compares, and takes what the watches report as evidence, not verdicts."""

from __future__ import annotations

import socket
import sys
from contextlib import ExitStack, suppress

from grader.runtime import wire

ERROR_TEXT = 4000  # characters of an exception's message sent back


def serve(path: str) -> None:
    """Answer the judge at the Unix socket `path` until it ends the session."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    namespace = shell.user_ns if shell is not None else sys.modules["__main__"].__dict__
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        Server(sock, namespace).run()


class Server:
    """One session with the judge over `sock`, answering from `namespace`."""

    def __init__(self, sock: socket.socket, namespace: dict):
        from grader.runtime import device

        self.sock = sock
        self.namespace = namespace
        self.device = device.current().torch_device
        self.mirrors: dict[int, object] = {}  # handle -> torch.UntypedStorage
        self.known: dict[int, bytearray] = {}  # handle -> the bytes the judge holds for it
        self.landing = wire.Landing()  # where each message's blobs are read, the mirrors compared
        self.made: list[int] = []  # handles (negative) of storages an answer made here
        self.trace: list = []  # the graded call's requests, as made for a speed cell
        self.result = None  # what the last request of the kept call returned, made again
        self.scratch = None  # what `timed` fills to flush the L2 cache

    def run(self) -> None:
        while True:
            header, blobs = wire.receive(self.sock, self.landing)
            op = header.get("op")
            if op == "end":
                return
            out: list = []
            try:
                reply = self.answer(op, header, blobs, out)
                self.made_storages(reply, out)
            except Exception as exc:  # the student's code failed, or the request was bad
                out.clear()
                for handle in self.made:
                    self.mirrors.pop(handle, None)
                self.made.clear()
                reply = {"ok": False, "error": failure(exc, header.get("name"))}
            wire.send(self.sock, reply, out)

    def answer(self, op, header: dict, blobs: list, out: list) -> dict:
        for handle in header.get("release", []):
            self.mirrors.pop(handle, None)
            self.known.pop(handle, None)
        if op == "describe":
            return {"ok": True, "names": {n: self.describe(n, out) for n in header["names"]}}
        if op not in ("call", "launch", "timed", "fetch"):
            raise wire.WireError(f"unknown request {op!r}")
        pushed = self.receive_storages(header.get("storages", []), blobs)
        codec = wire.Codec(tensor_in=self.tensor_in, tensor_out=self.tensor_out(out))
        if op == "timed":
            self.timed(codec, header)
            return {"ok": True}
        if op == "fetch":  # tensors' bytes; with "result", the last timed call's returned tensor
            kept = [self.result] if header.get("result") else []
            for slot, t in enumerate([*kept, *map(codec.decode, header.get("tensors", []))]):
                size = t.numel() * t.element_size()
                out.append(wire.contiguous_bytes(t, self.landing(slot, size)))
            return {"ok": True}
        args = codec.decode(header.get("args", {"tuple": []}))
        kwargs = codec.decode(header.get("kwargs", {"dict": []}))
        settings = codec.decode(header.get("settings", {"dict": []}))
        if isinstance(settings, dict):  # the release's settings, as the judge's test set them
            self.namespace.update((k, v) for k, v in settings.items() if isinstance(k, str))
        name = header["name"]
        if not isinstance(name, str) or name not in self.namespace:
            raise NameError(f"`{name}` is not defined in the notebook that was graded")
        target = self.namespace[name]
        grid = codec.decode(header["grid"]) if op == "launch" else None
        with ExitStack() as stack:
            watches = [open_watch(spec, codec, stack) for spec in header.get("watches", [])]
            result = (target[grid] if op == "launch" else target)(*args, **kwargs)
        if header.get("trace") == "begin":
            self.trace = []
        if header.get("trace"):
            self.trace.append((target, grid, args, kwargs))
        reply = {
            "ok": True,
            "result": codec.encode(result),
            "watches": [report(w, self, out) for w in watches],
        }
        reply["storages"] = self.changed(pushed, out)  # what the call wrote goes back
        return reply

    def timed(self, codec: wire.Codec, header: dict) -> None:
        """One timed call: the inputs drawn from the judge's seed, the L2 cache flushed by a fill
        of the judge's size, the kept call made again (its last request's result kept)."""
        import torch

        from grader.runtime import perf

        inputs = [codec.decode(spec) for spec in header["inputs"]]
        generator = torch.Generator(self.device)
        generator.manual_seed(int(header["seed"]))
        perf.draw(inputs, [tuple(m) for m in header["moments"]], generator)
        self.fill(int(header["flush"]))
        for target, grid, args, kwargs in self.trace:
            self.result = (target[grid] if grid is not None else target)(*args, **kwargs)
        if self.device == "cuda":
            torch.cuda.synchronize()

    def fill(self, size: int) -> None:
        """A fill of `size` bytes by the CUDA driver (a memset the activity log shows as such):
        it flushes the L2 cache and marks where a timed call starts."""
        import ctypes

        import torch

        if self.device != "cuda":
            return
        if self.scratch is None or self.scratch.numel() < size:
            self.scratch = torch.empty(size, dtype=torch.uint8, device="cuda")
        driver = ctypes.CDLL("libcuda.so.1")
        stream = torch.cuda.current_stream().cuda_stream
        status = driver.cuMemsetD8Async(
            ctypes.c_uint64(self.scratch.data_ptr()), ctypes.c_ubyte(0), ctypes.c_size_t(size),
            ctypes.c_void_p(stream),
        )  # fmt: skip
        if status != 0:
            raise RuntimeError(f"cuMemsetD8Async failed with CUDA error {status}")

    def describe(self, name: str, out: list) -> dict:
        if name not in self.namespace:
            return {"kind": "missing"}
        value = self.namespace[name]
        # a Triton kernel exists only where Triton is imported: a notebook that never imports it
        # is not made to (Triton imports torch: seconds of a kernel's start)
        runtime = sys.modules.get("triton.runtime")
        if runtime is not None and isinstance(value, runtime.KernelInterface):
            from grader.runtime import launches

            return {"kind": "kernel", "name": launches.kernel_name(value)}
        if callable(value) and not isinstance(value, type):
            return {"kind": "function", "name": str(getattr(value, "__name__", name))[:200]}
        codec = wire.Codec(tensor_out=self.tensor_out(out), strict=True)
        with suppress(wire.WireError):
            return {"kind": "value", "value": codec.encode(value)}
        return {"kind": "opaque", "type": type(value).__name__[:100]}

    def receive_storages(self, specs: list, blobs: list) -> list[int]:
        """Mirror the judge's storages, each sent or `same` (the mirror kept from an earlier
        message holds the bytes the judge has, kept here too, on the host, in `known`)."""
        for spec in specs:
            handle, mirror = spec["id"], self.mirrors.get(spec["id"])
            if spec.get("same") is True:
                if mirror is None or handle not in self.known:
                    raise wire.WireError(f"storage {handle!r} kept, but never sent")
                continue
            data = blobs[spec["blob"]]
            if mirror is None or mirror.nbytes() != len(data):
                import torch  # only where the judge sends tensors

                mirror = torch.empty(len(data), dtype=torch.uint8, device=self.device)
                self.mirrors[handle] = mirror = mirror.untyped_storage()
                self.known[handle] = bytearray(len(data))
            # kept: the next message is read into the blob's slot. Copied through a memoryview:
            # a bytearray's slice assignment first copies any other buffer into new memory
            memoryview(self.known[handle])[:] = data
            wire.fill_storage(mirror, self.known[handle])
        return [spec["id"] for spec in specs]

    def changed(self, pushed: list[int], out: list) -> list[dict]:
        """The judge's storages the call changed, their bytes appended to `out`. Compared on the
        host, by copies alone: no kernel of this side's runs on the GPU, whose activity log the
        judge reads for the call's own kernels. Each is copied into one slot of the landing,
        reused: the next message's blobs are read there only once the reply is sent."""
        back = []
        for handle in pushed:
            known = self.known[handle]
            now = wire.storage_bytes(self.mirrors[handle], self.landing(0, len(known)))
            if known == now:  # a bytearray's comparison: one memcmp
                continue
            memoryview(known)[:] = now  # in place, memory written before (as in receive_storages)
            back.append({"id": handle, "blob": len(out)})
            out.append(known)
        return back

    def tensor_in(self, spec: dict):
        if spec.get("storage") not in self.mirrors:
            raise wire.WireError(f"a tensor of storage {spec.get('storage')!r}, never sent")
        return wire.view_of(self.mirrors[spec["storage"]], spec)

    def handle_of(self, storage) -> int | None:
        for handle, mirror in self.mirrors.items():
            if mirror.data_ptr() == storage.data_ptr() and mirror.device == storage.device:
                return handle
        return None

    def tensor_out(self, out: list):
        """A tensor as a view of a storage: a mirror of the judge's, or one made here, which goes
        back whole (the judge keeps a copy, in which the launches' spans can be told)."""

        def encode(t) -> dict:
            storage = t.untyped_storage()
            handle = self.handle_of(storage)
            if handle is None:
                handle = -1 - len(self.made)
                self.mirrors[handle] = storage
                self.made.append(handle)
            return wire.spec(t, handle)

        return encode

    def made_storages(self, reply: dict, out: list) -> None:
        """Send the storages this answer's tensors made here, and forget them."""
        for handle in self.made:
            reply.setdefault("storages", []).append({"id": handle, "blob": len(out), "new": True})
            out.append(wire.storage_bytes(self.mirrors.pop(handle)))
        self.made.clear()

    def span(self, start: int, stop: int) -> list | None:
        """A span of addresses as [handle, first byte, end byte] of the mirror it lies in."""
        for handle, mirror in self.mirrors.items():
            base = mirror.data_ptr()
            if base <= start and stop <= base + mirror.nbytes():
                return [handle, start - base, stop - base]
        return None


# -- watches -------------------------------------------------------------------------------------


def open_watch(spec: dict, codec: wire.Codec, stack: ExitStack):
    """Open here, around the call, the watch the judge had open: (its kind, what it yields)."""
    from grader.runtime import integrity, launches

    kind = spec.get("kind")
    if kind == "launches":
        out = codec.decode(spec["out"]) if spec.get("out") is not None else None
        watch = launches.recording(spec.get("kernels", []), out)
    elif kind == "reference":
        watch = integrity.ReferenceWatch(spec["names"], refuse=spec.get("why"))
    elif kind == "poison":
        from grader.runtime import verify

        watch = verify.PoisonAllocations()
    else:
        raise wire.WireError(f"an unknown watch {kind!r}")
    return kind, stack.enter_context(watch)


def report(watch, server: Server, out: list) -> dict:
    """What one watch saw, for the judge's own watch to absorb."""
    kind, seen = watch
    if kind == "launches":
        found = {
            "launches": [
                {
                    "kernel": launch.kernel,
                    "spans": [server.span(s.start, s.stop) for s in launch.spans],
                    "tf32": [list(vars(d).values()) for d in launch.tf32_dots],
                }
                for launch in seen.launches
            ]
        }
        if seen.out is not None:
            found["written"], found["left"] = len(out), len(out) + 1
            out += [wire.contiguous_bytes(seen.written), wire.contiguous_bytes(seen.left)]
        return found
    if kind == "reference":
        return {"calls": list(seen.calls)}
    return {}


# -- failures ----------------------------------------------------------------------------------


def failure(exc: Exception, name: object) -> dict:
    """An exception as data: the course's own errors by kind (an unfilled stub, a failed check,
    the wrong kernel's work; grader.runtime.checks.explained), any other by its type's name and
    message."""
    from grader.runtime import checks, hints, launches, stubs

    exc = checks.explained(exc, f"`{name}`" if isinstance(name, str) else "your code")
    if isinstance(exc, stubs.StubNotFilled):
        return {"kind": "stub", "message": str(exc)}
    if isinstance(exc, launches.IntegrityError):
        return {"kind": "integrity", "message": _text(exc)}
    if isinstance(exc, hints.HintedError):
        hinted = [[h.pattern, h.evidence, h.cause] for h in exc.hints]
        return {"kind": "check", "message": _text(exc.detail), "hints": hinted}
    return {"kind": "error", "type": type(exc).__name__[:100], "message": _text(exc)}


def _text(value) -> str:
    text = str(value)
    return text if len(text) <= ERROR_TEXT else text[:ERROR_TEXT] + " [...]"
