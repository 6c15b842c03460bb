"""pipebench: a thin ctypes binding to libpipebench (no build step).

Datasets in any pipebench format as numpy arrays, the native loader's batches as numpy
arrays or torch tensors without a copy (DLPack), and the infer and train measurements the
command line makes (the same library functions). See docs/python.md and docs/infer.md.

The shared library is found through the environment variable PIPEBENCH_LIBRARY (or
PIPEBENCH_LIB), else beside an installed prefix (the lib/ folder above this package when it is
installed under PREFIX/share/pipebench/python, or above the `pipebench` program on the PATH),
else in the build tree (../../build/libpipebench.so relative to this package), else wherever the
dynamic loader finds libpipebench.so. infer and train come from the benchmark library beside it,
libpipebench-bench.so.
"""

import ctypes
import ctypes.util
import os
import shutil
import sys

try:
    import numpy as np
except ImportError as _e:  # pip installs it (a declared dependency); a bare Python may lack it
    raise ImportError(
        f"pipebench needs numpy, which {sys.executable} cannot import ({_e}): "
        f"{sys.executable} -m pip install numpy, or on Debian/Ubuntu apt install python3-numpy "
        "(in a venv made with --system-site-packages it is seen there too); see docs/python.md"
    ) from _e

__all__ = ["Dataset", "Loader", "Batch", "PipebenchError", "write", "library_path", "infer",
           "train", "Engine", "BenchmarkConfig", "run_inference_benchmark",
           "run_benchmark_suite", "read_results", "LayoutError"]

# ---- the library --------------------------------------------------------------------------

_LIB = "libpipebench.so"


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    # PREFIX/share/pipebench/python/pipebench -> PREFIX/lib
    yield os.path.join(here, "..", "..", "..", "..", "lib", _LIB)
    # pip install --prefix PREFIX: PREFIX/lib/pythonX.Y/site-packages/pipebench -> PREFIX/lib
    yield os.path.join(here, "..", "..", "..", _LIB)
    exe = shutil.which("pipebench")
    if exe:
        yield os.path.join(os.path.dirname(os.path.realpath(exe)), "..", "lib", _LIB)
    yield os.path.join(here, "..", "..", "build", _LIB)


def library_path():
    """Path of the shared library this module loads (see the module's doc for the order)."""
    for var in ("PIPEBENCH_LIBRARY", "PIPEBENCH_LIB"):
        env = os.environ.get(var)
        if env:
            return env
    for c in _candidates():
        if os.path.isfile(c):
            return os.path.normpath(c)
    return ctypes.util.find_library("pipebench") or _LIB


def _load():
    path = library_path()
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        env = [f"{v}={os.environ[v]}" for v in ("PIPEBENCH_LIBRARY", "PIPEBENCH_LIB")
               if os.environ.get(v)]
        if env:  # the variable alone decides
            tried = env
        else:
            tried = ["PIPEBENCH_LIBRARY (not set)"] + [os.path.normpath(c) for c in _candidates()]
            tried.append(f"{_LIB} through the dynamic loader (LD_LIBRARY_PATH, ldconfig)")
        raise OSError(
            f"pipebench cannot load its library {path}: {e}. Places tried, in order: "
            + "; ".join(tried)
            + ". Set PIPEBENCH_LIBRARY to the file, e.g. PIPEBENCH_LIBRARY=PREFIX/lib/"
            f"{_LIB} (PREFIX where `cmake --install` put pipebench), or build/{_LIB} of a "
            "source tree; see docs/python.md") from e


_lib = _load()


def _load_bench():
    """The benchmark library beside it (libpipebench-bench.so: infer and train), or None."""
    path = os.path.join(os.path.dirname(library_path()), "libpipebench-bench.so")
    try:
        return ctypes.CDLL(path)
    except OSError:
        return None


_bench = _load_bench()


class PipebenchError(RuntimeError):
    """A pipebench call failed; .code is the PB_E* status, the message names the file."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


# ---- C structs (layouts mirror include/pipebench/*.h) ---------------------------------------

PB_NDIM = 5
PB_MAX_CHANNELS = 32


class _Error(ctypes.Structure):
    _fields_ = [("message", ctypes.c_char * 1024)]


class _Channel(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_char * 48),
        ("name", ctypes.c_char * 64),
        ("emission_um", ctypes.c_float),
        ("excitation_um", ctypes.c_float),
        ("illumination", ctypes.c_char * 24),
        ("color_rgba", ctypes.c_uint32),
    ]


class _ImageMeta(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 256),
        ("id", ctypes.c_char * 64),
        ("dtype", ctypes.c_int),
        ("shape", ctypes.c_int64 * PB_NDIM),
        ("physical_size", ctypes.c_double * 3),
        ("physical_unit", (ctypes.c_char * 16) * 3),
        ("n_channels", ctypes.c_int),
        ("channels", _Channel * PB_MAX_CHANNELS),
    ]


class _LoaderParams(ctypes.Structure):
    _fields_ = [
        ("format", ctypes.c_char_p),
        ("batch_size", ctypes.c_int),
        ("workers", ctypes.c_int),
        ("prefetch", ctypes.c_int),
        ("shuffle", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("drop_last", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("transform", ctypes.c_int),
        ("mean", ctypes.c_float),
        ("std", ctypes.c_float),
        ("out_dtype", ctypes.c_int),
        ("cache", ctypes.c_int),
        ("cache_path", ctypes.c_char_p),
        ("skip_errors", ctypes.c_int),
        ("allocator", ctypes.c_void_p),  # const pb_allocator *; NULL: the process-wide one
        ("shard_pad", ctypes.c_int),
        ("crop_h", ctypes.c_int),
        ("crop_w", ctypes.c_int),
        ("resize", ctypes.c_int),
        ("scale_min", ctypes.c_float),
        ("scale_max", ctypes.c_float),
        ("ratio_min", ctypes.c_float),
        ("ratio_max", ctypes.c_float),
        ("flip", ctypes.c_int),
        ("reduced_decode", ctypes.c_int),
        ("reads_in_flight", ctypes.c_int),
        ("bytes_in_flight", ctypes.c_int64),
    ]


_TIME_FIELDS = ["read_ns", "decompress_ns", "decode_ns", "convert_ns", "transform_ns",
                "collate_ns", "wait_ns", "bytes_read", "bytes_decoded"]


class _BatchTimes(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in _TIME_FIELDS]


class _Batch(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * 5),
        ("indices", ctypes.POINTER(ctypes.c_int64)),
        ("number", ctypes.c_int64),
        ("epoch", ctypes.c_int64),
        ("skipped", ctypes.c_int64),
        ("times", _BatchTimes),
        ("native_dtype", ctypes.c_int),  # pixel type; the element type when dtype is native
        ("labels", ctypes.POINTER(ctypes.c_int64)),
    ]


class _LoaderStats(ctypes.Structure):
    _fields_ = [
        ("batches", ctypes.c_int64),
        ("samples", ctypes.c_int64),
        ("skipped", ctypes.c_int64),
        ("times", _BatchTimes),
        ("preload_ns", ctypes.c_int64),
        ("preload_bytes", ctypes.c_int64),
        ("dataset_count", ctypes.c_int64),
    ]


_c = ctypes.c_void_p
_err_p = ctypes.POINTER(_Error)


def _fn(name, restype, *argtypes):
    try:
        f = getattr(_lib, name)
    except AttributeError:
        if _bench is None:  # an older or partial install: the error names what is missing
            raise
        f = getattr(_bench, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_strerror = _fn("pb_strerror", ctypes.c_char_p, ctypes.c_int)
_ds_open = _fn("pb_dataset_open", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
               ctypes.POINTER(_c), _err_p)
_ds_free = _fn("pb_dataset_free", None, _c)
_ds_count = _fn("pb_dataset_count", ctypes.c_int64, _c)
_ds_format = _fn("pb_dataset_format", ctypes.c_char_p, _c)
_ds_meta = _fn("pb_dataset_meta", ctypes.c_int, _c, ctypes.c_int64, ctypes.POINTER(_ImageMeta),
               _err_p)
_ds_read = _fn("pb_dataset_read", ctypes.c_int, _c, ctypes.c_int64, _c, ctypes.c_size_t, _c,
               _err_p)
_meta_init = _fn("pb_image_meta_init", None, ctypes.POINTER(_ImageMeta), ctypes.c_char_p,
                 ctypes.c_int, ctypes.POINTER(ctypes.c_int64))
_wr_new = _fn("pb_writer_new", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, _c,
              ctypes.POINTER(_c), _err_p)
_wr_add = _fn("pb_writer_add", ctypes.c_int, _c, ctypes.POINTER(_ImageMeta), _c, _err_p)
_wr_finish = _fn("pb_writer_finish", ctypes.c_int, _c, _err_p)
_wr_free = _fn("pb_writer_free", None, _c)
_params_init = _fn("pb_loader_params_init", None, ctypes.POINTER(_LoaderParams))
_params_set = _fn("pb_loader_params_set", ctypes.c_int, ctypes.POINTER(_LoaderParams),
                  ctypes.c_char_p, ctypes.c_char_p, _err_p)
_ld_new = _fn("pb_loader_new", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_LoaderParams),
              ctypes.POINTER(_c), _err_p)
_ld_next = _fn("pb_loader_next", ctypes.c_int, _c, ctypes.POINTER(ctypes.POINTER(_Batch)), _err_p)
_ld_reset = _fn("pb_loader_reset", ctypes.c_int, _c, ctypes.c_int64, _err_p)
_ld_free = _fn("pb_loader_free", None, _c)
_ld_batches = _fn("pb_loader_batches_per_epoch", ctypes.c_int64, _c)
_ld_reads_in_flight = _fn("pb_loader_reads_in_flight", ctypes.c_int, _c)
_ld_stats = _fn("pb_loader_get_stats", None, _c, ctypes.POINTER(_LoaderStats))
_batch_free = _fn("pb_batch_free", None, ctypes.POINTER(_Batch))
_host_allocator = _fn("pb_device_host_allocator", ctypes.c_void_p, ctypes.c_char_p, _err_p)
_batch_dlpack = _fn("pb_batch_to_dlpack", ctypes.c_int, ctypes.POINTER(_Batch),
                    ctypes.POINTER(_c), _err_p)

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_DLTENSOR = b"dltensor"  # module-level: the capsule keeps a pointer to this name

_DTYPES = ["uint8", "uint16", "uint32", "int16", "float32", "float64"]
_OUT_DTYPES = ["float32", "float16", "bfloat16", "native"]


def _check(rc, err):
    if rc != 0:
        msg = err.message.decode("utf-8", "replace") or _strerror(rc).decode()
        raise PipebenchError(rc, msg)


def _b(s):
    return None if s is None else os.fsencode(s)


def _s(raw):
    return raw.decode("utf-8", "replace")


# ---- datasets -------------------------------------------------------------------------------


class Dataset:
    """An open dataset. Dataset(path, format=None): format is a pipebench format name, or None
    to detect it. One Dataset is used by one thread at a time."""

    def __init__(self, path, format=None):
        self._h = _c()
        err = _Error()
        _check(_ds_open(_b(path), _b(format), ctypes.byref(self._h), err), err)
        self.path = os.fspath(path)

    def close(self):
        if self._h:
            _ds_free(self._h)
            self._h = _c()

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def format(self):
        return _s(_ds_format(self._h))

    def __len__(self):
        return int(_ds_count(self._h))

    def _meta(self, i):
        m = _ImageMeta()
        err = _Error()
        _check(_ds_meta(self._h, int(i), ctypes.byref(m), err), err)
        return m

    def meta(self, i):
        """Metadata of image i as a dict (shape is T, C, Z, Y, X)."""
        m = self._meta(i)
        return {
            "name": _s(m.name),
            "id": _s(m.id),
            "dtype": _DTYPES[m.dtype],
            "shape": tuple(m.shape),
            "physical_size": tuple(m.physical_size),
            "physical_unit": tuple(_s(u.value) for u in m.physical_unit),
            "channels": [{"id": _s(c.id), "name": _s(c.name), "emission_um": c.emission_um,
                          "excitation_um": c.excitation_um, "color_rgba": c.color_rgba}
                         for c in m.channels[:m.n_channels]],
        }

    def read(self, i):
        """Pixels of image i as a new numpy array of shape (T, C, Z, Y, X)."""
        m = self._meta(i)
        out = np.empty(tuple(m.shape), dtype=_DTYPES[m.dtype])
        err = _Error()
        _check(_ds_read(self._h, int(i), out.ctypes.data, out.nbytes, None, err), err)
        return out


def write(path, images, format="raw", names=None):
    """Writes numpy images (up to 5 dimensions, read as T, C, Z, Y, X with missing leading axes
    of size 1) as a dataset in the given format."""
    h = _c()
    err = _Error()
    _check(_wr_new(_b(path), _b(format), None, ctypes.byref(h), err), err)
    try:
        for k, img in enumerate(images):
            a = np.ascontiguousarray(img)
            if a.ndim > 5 or a.dtype.name not in _DTYPES:
                raise ValueError("image %d: want at most 5 dimensions of %s" % (k, _DTYPES))
            shape = (ctypes.c_int64 * 5)(*((1,) * (5 - a.ndim) + a.shape))
            m = _ImageMeta()
            name = names[k] if names is not None else "img_%05d" % k
            _meta_init(ctypes.byref(m), name.encode(), _DTYPES.index(a.dtype.name), shape)
            _check(_wr_add(h, ctypes.byref(m), a.ctypes.data, err), err)
        _check(_wr_finish(h, err), err)
    finally:
        _wr_free(h)


# ---- loader ---------------------------------------------------------------------------------


class Batch:
    """One batch of the native loader. numpy() and torch() share its memory (no copy); the
    memory lives as long as any of them does."""

    def __init__(self, ptr):
        self._p = ptr

    def _get(self):
        if not self._p:
            raise ValueError("batch already released")
        return self._p.contents

    @property
    def shape(self):
        b = self._get()
        return tuple(b.shape[: b.ndim])

    @property
    def dtype(self):
        """Element type: "float32", "float16", "bfloat16", or for native batches the pixel
        type itself ("uint8", "uint16", "uint32", "int16", "float32", "float64")."""
        b = self._get()
        return _DTYPES[b.native_dtype] if _OUT_DTYPES[b.dtype] == "native" else _OUT_DTYPES[b.dtype]

    @property
    def native(self):
        """True for a batch of the images' own pixels (Loader(..., dtype="native"))."""
        return _OUT_DTYPES[self._get().dtype] == "native"

    @property
    def indices(self):
        b = self._get()
        return np.ctypeslib.as_array(b.indices, shape=(b.shape[0],)).copy()

    @property
    def labels(self):
        """Class label of each sample (imagefolder: its class folder's index in sorted order, as
        torchvision's ImageFolder); -1 for formats without labels."""
        b = self._get()
        return np.ctypeslib.as_array(b.labels, shape=(b.shape[0],)).copy()

    @property
    def number(self):
        return int(self._get().number)

    @property
    def data_ptr(self):
        return int(self._get().data)

    @property
    def times(self):
        t = self._get().times
        return {n: int(getattr(t, n)) for n in _TIME_FIELDS}

    def numpy(self):
        """A numpy view of the batch (float32, float16; bfloat16 comes as its uint16 bits; native
        batches in their pixel type, e.g. uint16). The view keeps this batch alive."""
        b = self._get()
        buf = (ctypes.c_uint8 * b.nbytes).from_address(b.data)
        buf._owner = self  # the view's base holds the batch
        dt = np.uint16 if self.dtype == "bfloat16" else np.dtype(self.dtype)
        return np.frombuffer(buf, dtype=dt).reshape(self.shape)

    def torch(self):
        """A torch tensor over the batch's memory through DLPack (no copy). The tensor holds its
        own reference: it stays valid after this Batch is gone. Native batches keep their pixel
        type (DLPack kDLUInt/kDLInt/kDLFloat); torch versions without uint16/uint32 tensors
        refuse those."""
        import torch.utils.dlpack

        mt = _c()
        err = _Error()
        _check(_batch_dlpack(self._p, ctypes.byref(mt), err), err)
        capsule = _capsule_new(mt, _DLTENSOR, None)
        return torch.utils.dlpack.from_dlpack(capsule)

    def release(self):
        if self._p:
            _batch_free(self._p)
            self._p = None

    __del__ = release


_TRANSFORMS = {"none", "normalize", "augment", "random_crop", "random_resized_crop",
               "center_crop_resize"}


class Loader:
    """The native loader over a dataset. Iterating yields Batch objects for one epoch; each new
    iteration starts the next epoch (reshuffled with seed + epoch).

    Loader(path, batch_size=16, workers=0, shuffle=False, seed=42, transform="none",
           cache="none", dtype="float32", prefetch=2, drop_last=False, rank=0, world_size=1,
           mean=0.5, std=0.5, skip_errors=False, format=None, cache_path=None, crop=224,
           resize=256, scale=(0.08, 1.0), ratio=(3/4, 4/3), flip=True, reduced_decode=True,
           pinned=False, reads_in_flight=0, bytes_in_flight=0)

    dtype "native" gives batches of the images' own pixels (no cast, no scaling; transform
    must be "none").

    cache="disk:PATH" (a dataset at a URL): the ranges read are kept in the folder PATH on first
    read and served from there after, keyed by the object's ETag (docs/remote.md).

    The crop transforms ("random_crop", "random_resized_crop", "center_crop_resize") take images
    of any height and width and give batches of N,C,crop,crop (crop may be an (h, w) pair);
    resize is the evaluation transform's shorter side, scale and ratio the training transform's
    ranges, flip its random horizontal flip, reduced_decode lets JPEG decode at 1/2, 1/4 or 1/8
    where the output keeps its resolution (docs/loader.md). Batch.labels gives the samples'
    class labels.

    reads_in_flight: sample reads kept in flight at once across the workers, each on a reader
    thread of its own (0: auto, 32 for a URL, one per worker for a local path); bytes_in_flight
    caps them by bytes (an int or text such as "64M"; 0: auto, 64 MiB), counting each read as
    one image's decoded size. Loader.reads_in_flight tells the number used. Not the I/O layer's
    requests in flight per object (the CLI's --in-flight, docs/remote.md).

    pinned=True puts batches in page-locked memory from the CUDA module (PipebenchError where
    no GPU is usable), so a copy to the GPU is asynchronous; pipebench.torch.Loader uses it.
    """

    def __init__(self, path, batch_size=16, workers=0, shuffle=False, seed=42, transform="none",
                 cache="none", dtype="float32", prefetch=2, drop_last=False, rank=0,
                 world_size=1, mean=0.5, std=0.5, skip_errors=False, format=None,
                 cache_path=None, crop=224, resize=256, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
                 flip=True, reduced_decode=True, pinned=False, reads_in_flight=0,
                 bytes_in_flight=0):
        if transform not in _TRANSFORMS:
            raise ValueError("transform must be one of %s" % sorted(_TRANSFORMS))
        if isinstance(cache, str) and cache.startswith("disk:"):
            # remote reads kept in a folder on disk: cache none, with that folder as cache_path
            cache, cache_path = "none", cache[5:]
        p = _LoaderParams()
        _params_init(ctypes.byref(p))
        err = _Error()
        opts = {"batch_size": batch_size, "workers": workers, "prefetch": prefetch,
                "shuffle": int(bool(shuffle)), "seed": seed, "drop_last": int(bool(drop_last)),
                "rank": rank, "world_size": world_size, "transform": transform, "mean": mean,
                "std": std, "dtype": dtype, "cache": cache, "skip_errors": int(bool(skip_errors)),
                "crop": ("%dx%d" % (crop[0], crop[1])) if isinstance(crop, (tuple, list))
                else int(crop),
                "resize": int(resize), "scale": "%r,%r" % (float(scale[0]), float(scale[1])),
                "ratio": "%r,%r" % (float(ratio[0]), float(ratio[1])),
                "flip": int(bool(flip)), "reduced_decode": int(bool(reduced_decode)),
                "reads_in_flight": int(reads_in_flight), "bytes_in_flight": bytes_in_flight}
        for k, v in opts.items():
            _check(_params_set(ctypes.byref(p), k.encode(), repr(v).encode()
                               if isinstance(v, float) else str(v).encode(), err), err)
        fmt, cp = _b(format), _b(cache_path)  # alive until pb_loader_new returns
        p.format = fmt
        p.cache_path = cp
        if pinned:
            p.allocator = _host_allocator(b"cuda", err)
            if not p.allocator:
                raise PipebenchError(-10004, err.message.decode("utf-8", "replace"))
        self._h = _c()
        _check(_ld_new(_b(path), ctypes.byref(p), ctypes.byref(self._h), err), err)
        self._epoch = 0
        self._started = False

    def close(self):
        if getattr(self, "_h", None):
            _ld_free(self._h)
            self._h = _c()

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self):
        return int(_ld_batches(self._h))

    @property
    def reads_in_flight(self):
        """Sample reads this loader keeps in flight at most (its reader team's size)."""
        return int(_ld_reads_in_flight(self._h))

    @property
    def epoch(self):
        return self._epoch

    def reset(self, epoch):
        """Starts epoch `epoch` from its first batch."""
        err = _Error()
        _check(_ld_reset(self._h, int(epoch), err), err)
        self._epoch = int(epoch)
        self._started = True

    def next(self):
        """The next Batch of the current epoch, or None at its end."""
        out = ctypes.POINTER(_Batch)()
        err = _Error()
        _check(_ld_next(self._h, ctypes.byref(out), err), err)
        self._started = True
        return Batch(out) if out else None

    def __iter__(self):
        if self._started:
            self.reset(self._epoch + 1)
        self._started = True
        while True:
            b = self.next()
            if b is None:
                return
            yield b

    def stats(self):
        """Totals since the loader was made, as a dict."""
        s = _LoaderStats()
        _ld_stats(self._h, ctypes.byref(s))
        d = {"batches": s.batches, "samples": s.samples, "skipped": s.skipped,
             "preload_ns": s.preload_ns, "preload_bytes": s.preload_bytes,
             "dataset_count": s.dataset_count}
        d.update({n: int(getattr(s.times, n)) for n in _TIME_FIELDS})
        return d


# ---- infer and train (the same functions `pipebench infer` and `pipebench train` call) ------

_NOTE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)
_PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_long,
                                ctypes.c_long, ctypes.c_double)


class _InferParams(ctypes.Structure):
    _fields_ = [
        ("frameworks", ctypes.c_char_p),
        ("model", ctypes.c_char_p),
        ("dtype", ctypes.c_char_p),
        ("device", ctypes.c_char_p),
        ("batch_sizes", ctypes.POINTER(ctypes.c_int)),
        ("n_batch_sizes", ctypes.c_int),
        ("iterations", ctypes.c_int),
        ("warmup", ctypes.c_int),
        ("threads", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("data_source", ctypes.c_char_p),
        ("output_dir", ctypes.c_char_p),
        ("plot", ctypes.c_int),
        ("python", ctypes.c_char_p),
        ("peer_timeout_s", ctypes.c_double),
        ("note", _NOTE_FN),
        ("note_ctx", ctypes.c_void_p),
        ("progress", _PROGRESS_FN),
        ("progress_ctx", ctypes.c_void_p),
        ("data_format", ctypes.c_char_p),
        ("cancel", ctypes.c_void_p),  # volatile sig_atomic_t *; NULL here
    ]


class _TrainParams(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_char_p),
        ("num_images", ctypes.c_int64),
        ("model", ctypes.c_char_p),
        ("loss", ctypes.c_char_p),
        ("dtype", ctypes.c_char_p),
        ("device", ctypes.c_char_p),
        ("epochs", ctypes.c_int),
        ("batch_size", ctypes.c_int),
        ("lr", ctypes.c_double),
        ("threads", ctypes.c_int),
        ("workers", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("metrics_path", ctypes.c_char_p),
        ("note", _NOTE_FN),
        ("note_ctx", ctypes.c_void_p),
        ("progress", _PROGRESS_FN),
        ("progress_ctx", ctypes.c_void_p),
        ("reads_in_flight", ctypes.c_int),
        ("bytes_in_flight", ctypes.c_int64),
    ]


_TRAIN_RESULT_NUMBERS = [
    ("steps", ctypes.c_int64), ("total_s", ctypes.c_double), ("first_epoch_s", ctypes.c_double),
    ("first_batch_data_s", ctypes.c_double), ("first_batch_compute_s", ctypes.c_double),
    ("data_s", ctypes.c_double), ("compute_s", ctypes.c_double),
    ("data_wait_fraction", ctypes.c_double), ("throughput_ips", ctypes.c_double),
    ("first_loss", ctypes.c_double), ("final_loss", ctypes.c_double),
    ("peak_rss_mb", ctypes.c_double), ("engine_memory_mb", ctypes.c_double),
    ("gflops_per_image_forward", ctypes.c_double)]


class _TrainResult(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_char * 16), ("device", ctypes.c_char * 16),
                ("device_name", ctypes.c_char * 128), ("isa", ctypes.c_char * 48),
                ("threads", ctypes.c_int), ("parameters", ctypes.c_int64),
                ("images", ctypes.c_int64), ("channels", ctypes.c_int), ("height", ctypes.c_int),
                ("width", ctypes.c_int)] + _TRAIN_RESULT_NUMBERS


_infer_init = _fn("pb_infer_params_init", None, ctypes.POINTER(_InferParams))
_infer_run = _fn("pb_infer_run", ctypes.c_int, ctypes.POINTER(_InferParams), ctypes.POINTER(_c),
                 ctypes.c_char_p, ctypes.c_size_t, _err_p)
_train_init = _fn("pb_train_params_init", None, ctypes.POINTER(_TrainParams))
_train_run = _fn("pb_train_run", ctypes.c_int, ctypes.POINTER(_TrainParams),
                 ctypes.POINTER(_TrainResult), _err_p)
_tb_free = _fn("pb_table_free", None, _c)
_tb_rows = _fn("pb_table_rows", ctypes.c_size_t, _c)
_tb_cols = _fn("pb_table_cols", ctypes.c_size_t, _c)
_tb_col_name = _fn("pb_table_col_name", ctypes.c_char_p, _c, ctypes.c_size_t)
_tb_col_type = _fn("pb_table_col_type", ctypes.c_int, _c, ctypes.c_size_t)
_tb_is_null = _fn("pb_table_is_null", ctypes.c_int, _c, ctypes.c_size_t, ctypes.c_size_t)
_tb_get = [_fn("pb_table_get_str", ctypes.c_char_p, _c, ctypes.c_size_t, ctypes.c_size_t),
           _fn("pb_table_get_i64", ctypes.c_int64, _c, ctypes.c_size_t, ctypes.c_size_t),
           _fn("pb_table_get_f64", ctypes.c_double, _c, ctypes.c_size_t, ctypes.c_size_t),
           _fn("pb_table_get_bool", ctypes.c_int, _c, ctypes.c_size_t, ctypes.c_size_t)]


def _table_rows(t):
    """A pb_table as a list of dicts (NULL cells as None)."""
    cols = [(_s(_tb_col_name(t, c)), _tb_col_type(t, c)) for c in range(_tb_cols(t))]
    out = []
    for r in range(_tb_rows(t)):
        row = {}
        for c, (name, kind) in enumerate(cols):
            if _tb_is_null(t, r, c):
                row[name] = None
                continue
            v = _tb_get[kind](t, r, c)
            row[name] = _s(v) if kind == 0 else (bool(v) if kind == 3 else v)
        out.append(row)
    return out


def _note_cb(notes):
    def cb(ctx, level, line):
        notes.append((int(level), _s(line)))
    return _NOTE_FN(cb)


def infer(frameworks="pipebench", model="embed", batch_sizes=(1, 8, 32, 128), iterations=20,
          warmup=3, dtype="float32", device="auto", threads=0, seed=42, data_source="synthetic",
          output_dir=None, plot=False, python=None, peer_timeout_s=0, notes=None,
          data_format=None, csv_path=None):
    """Times a model's forward pass across batch sizes, as `pipebench infer` does, and returns
    the rows (one dict per framework and batch size; columns in docs/infer.md).

    frameworks: "pipebench" (its engine), "onednn", "cuda", "pytorch" (or "torch"),
    "torch-compile", "jax", "both", "peers", "all", or a list of them; model likewise ("both":
    resnet50 and vit_b_16). A peer whose framework is missing gives no rows; the reason is appended to
    `notes` (a list of (level, line) pairs, when given) like every other note. output_dir: also
    write the CSV there (its path is the note starting with "results: ", and is appended to the
    list csv_path when one is given)."""
    if not isinstance(frameworks, str):
        frameworks = ",".join(frameworks)
    if not isinstance(model, str):
        model = ",".join(model)
    p = _InferParams()
    _infer_init(ctypes.byref(p))
    sizes = (ctypes.c_int * len(batch_sizes))(*batch_sizes)
    keep = [_b(frameworks), _b(model), _b(dtype), _b(device), _b(data_source), _b(output_dir),
            _b(python), _b(data_format)]  # alive until the call returns
    (p.frameworks, p.model, p.dtype, p.device, p.data_source, p.output_dir, p.python,
     p.data_format) = keep
    p.batch_sizes, p.n_batch_sizes = sizes, len(batch_sizes)
    p.iterations, p.warmup, p.threads, p.seed = iterations, warmup, threads, seed
    p.plot, p.peer_timeout_s = int(bool(plot)), float(peer_timeout_s)
    sink = notes if notes is not None else []
    p.note = _note_cb(sink)
    t = _c()
    err = _Error()
    path = ctypes.create_string_buffer(4400)
    rc = _infer_run(ctypes.byref(p), ctypes.byref(t), path, len(path), err)
    _check(rc, err)
    if csv_path is not None and path.value:
        csv_path.append(os.fsdecode(path.value))
    try:
        return _table_rows(t)
    finally:
        _tb_free(t)


def train(data="synthetic", model="embed", epochs=1, batch_size=16, lr=0.01,
          loss="cross_entropy", num_images=256, device="auto", threads=0, workers=0, seed=42,
          metrics_path=None, notes=None, reads_in_flight=0, bytes_in_flight="0"):
    """Plain SGD training as `pipebench train` does it (a dataset is read through the loader);
    returns the result as a dict (times in seconds). reads_in_flight and bytes_in_flight (bytes,
    or a string with a K, M or G suffix) are the loader's, as in Loader."""
    lp = _LoaderParams()  # bytes_in_flight parsed as the loader's own option is
    _params_init(ctypes.byref(lp))
    err = _Error()
    _check(_params_set(ctypes.byref(lp), b"bytes_in_flight", str(bytes_in_flight).encode(), err),
           err)
    p = _TrainParams()
    _train_init(ctypes.byref(p))
    keep = [_b(data), _b(model), _b(loss), _b(device), _b(metrics_path)]
    p.data, p.model, p.loss, p.device, p.metrics_path = keep
    p.epochs, p.batch_size, p.lr, p.num_images = epochs, batch_size, float(lr), num_images
    p.threads, p.workers, p.seed = threads, workers, seed
    p.reads_in_flight, p.bytes_in_flight = int(reads_in_flight), lp.bytes_in_flight
    sink = notes if notes is not None else []
    p.note = _note_cb(sink)
    r = _TrainResult()
    err = _Error()
    _check(_train_run(ctypes.byref(p), ctypes.byref(r), err), err)
    out = {n: _s(getattr(r, n)) for n in ("backend", "device", "device_name", "isa")}
    out.update({n: getattr(r, n) for n in ("threads", "parameters", "images", "channels",
                                           "height", "width")})
    out.update({n: getattr(r, n) for n, _ in _TRAIN_RESULT_NUMBERS})
    return out


# ---- engines: raw batches into a model on the GPU, outputs to torch through DLPack ----------

class _EngineParams(ctypes.Structure):
    _fields_ = [
        ("model", ctypes.c_char_p),
        ("device", ctypes.c_char_p),
        ("backend", ctypes.c_char_p),
        ("dtype", ctypes.c_char_p),
        ("batch_size", ctypes.c_int),
        ("channels", ctypes.c_int),
        ("height", ctypes.c_int),
        ("width", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("threads", ctypes.c_int),
        ("training", ctypes.c_int),
        ("loss", ctypes.c_char_p),
        ("momentum", ctypes.c_float),
        ("weight_decay", ctypes.c_float),
    ]


class _NativeBatch(ctypes.Structure):
    _fields_ = [
        ("pixels", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("n", ctypes.c_int64),
        ("c", ctypes.c_int64),
        ("z", ctypes.c_int64),
        ("h", ctypes.c_int64),
        ("w", ctypes.c_int64),
        ("mean", ctypes.c_float),
        ("std", ctypes.c_float),
        ("channel_mean", ctypes.POINTER(ctypes.c_float)),
        ("channel_std", ctypes.POINTER(ctypes.c_float)),
    ]


_engine_new = _fn("pb_engine_new", ctypes.c_int, ctypes.POINTER(_EngineParams),
                  ctypes.POINTER(_c), _err_p)
_engine_free = _fn("pb_engine_free", None, _c)
_engine_sync = _fn("pb_engine_synchronize", ctypes.c_int, _c, _err_p)
_tensor_new = _fn("pb_engine_tensor_new", ctypes.c_int, _c, ctypes.c_int, ctypes.POINTER(_c),
                  _err_p)
_tensor_free = _fn("pb_tensor_free", None, _c)
_tensor_bytes = _fn("pb_tensor_bytes", ctypes.c_size_t, _c)
_tensor_read = _fn("pb_tensor_read", ctypes.c_int, _c, _c, ctypes.c_size_t, _err_p)
_tensor_dlpack = _fn("pb_tensor_to_dlpack", ctypes.c_int, _c, ctypes.POINTER(_c), _err_p)
_forward_native = _fn("pb_engine_forward_native", ctypes.c_int, _c, ctypes.POINTER(_NativeBatch),
                      _c, ctypes.POINTER(ctypes.c_int64), _err_p)


class Engine:
    """A model compiled for one device, dtype and batch size (pb_engine). forward_native() takes
    raw images (a native Batch of the Loader, or a numpy array N,C,H,W or N,C,Z,H,W of uint8,
    uint16, float32 ...): on cuda they are copied to the GPU as they are and padded, replicated
    and normalised there. output_torch() hands the logits to torch without a copy (a CUDA
    tensor on cuda, through DLPack)."""

    def __init__(self, model="resnet50", device="auto", dtype="float32", batch_size=1,
                 channels=0, height=0, width=0, seed=42):
        p = _EngineParams(_b(model), _b(device), None, _b(dtype), batch_size, channels, height,
                          width, seed, 0, 0, None)
        self._e = _c()
        self._out = _c()
        self.batch_size = batch_size
        err = _Error()
        _check(_engine_new(ctypes.byref(p), ctypes.byref(self._e), err), err)
        _check(_tensor_new(self._e, 1, ctypes.byref(self._out), err), err)
        self.outputs = _tensor_bytes(self._out) // 4 // batch_size
        self.last_h2d_ns = 0

    def forward_native(self, images, mean=0.0, std=1.0):
        """Queues a forward of one batch of raw images; returns once they are copied. mean and
        std normalise ((x / max) - mean) / std as the loader's normalize does; each may also be a
        sequence with one value per channel of the images (ImageNet's for RGB, say)."""
        keep = images
        if isinstance(images, Batch):
            b = images._get()
            if _OUT_DTYPES[b.dtype] != "native":
                raise ValueError("forward_native takes native batches (Loader(dtype='native'))")
            shape = [int(b.shape[i]) for i in range(b.ndim)]
            ptr, dt = b.data, int(b.native_dtype)
        else:
            arr = np.ascontiguousarray(images)
            keep = arr
            shape = list(arr.shape)
            ptr, dt = arr.ctypes.data, _DTYPES.index(str(arr.dtype))
        if len(shape) == 4:
            shape = shape[:2] + [1] + shape[2:]
        if len(shape) != 5:
            raise ValueError(f"images of shape {shape}: N,C,H,W or N,C,Z,H,W")
        per = not (isinstance(mean, (int, float)) and isinstance(std, (int, float)))
        if per:
            cm = [float(v) for v in (mean if hasattr(mean, "__len__") else [mean] * shape[1])]
            cs = [float(v) for v in (std if hasattr(std, "__len__") else [std] * shape[1])]
            if len(cm) != shape[1] or len(cs) != shape[1]:
                raise ValueError(f"mean and std: one value each per channel ({shape[1]}), "
                                 f"not {len(cm)} and {len(cs)}")
            cm_arr, cs_arr = (ctypes.c_float * len(cm))(*cm), (ctypes.c_float * len(cs))(*cs)
            nb = _NativeBatch(ptr, dt, *shape, 0.0, 1.0, cm_arr, cs_arr)
        else:
            nb = _NativeBatch(ptr, dt, *shape, mean, std, None, None)
        ns = ctypes.c_int64(0)
        err = _Error()
        _check(_forward_native(self._e, ctypes.byref(nb), self._out, ctypes.byref(ns), err), err)
        del keep  # the copy is done when the call returns
        self.last_h2d_ns = ns.value

    def synchronize(self):
        err = _Error()
        _check(_engine_sync(self._e, err), err)

    def output_numpy(self):
        """The last forward's outputs (batch x outputs float32), copied to host memory."""
        out = np.empty((self.batch_size, self.outputs), dtype=np.float32)
        err = _Error()
        _check(_tensor_read(self._out, out.ctypes.data, out.nbytes, err), err)
        return out

    def output_torch(self):
        """The output tensor as torch sees it through DLPack, without a copy (on the GPU for a
        cuda engine). It is the engine's buffer: the next forward overwrites it. The tensor
        keeps this Engine alive."""
        import torch.utils.dlpack

        self.synchronize()
        mt = _c()
        err = _Error()
        _check(_tensor_dlpack(self._out, ctypes.byref(mt), err), err)
        t = torch.utils.dlpack.from_dlpack(_capsule_new(mt, _DLTENSOR, None))
        t._pipebench_engine = self  # the memory belongs to this engine
        return t

    def close(self):
        if getattr(self, "_out", None) is not None and self._out.value:
            _tensor_free(self._out)
            self._out = None
        if getattr(self, "_e", None) is not None and self._e.value:
            _engine_free(self._e)
            self._e = None

    __del__ = close


# ---- the structs above against the library's own layout ------------------------------------
# Each ctypes copy of a C struct is compared at import with what the loaded library reports
# (pb_struct_layout: sizeof, and each field's name, offset and size), so a header changed
# without this file, or a library of another version, fails here instead of reading garbage.


class _FieldLayout(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("offset", ctypes.c_size_t), ("size", ctypes.c_size_t)]


_STRUCTS = {"pb_error": _Error, "pb_channel": _Channel, "pb_image_meta": _ImageMeta,
            "pb_loader_params": _LoaderParams, "pb_batch_times": _BatchTimes, "pb_batch": _Batch,
            "pb_loader_stats": _LoaderStats, "pb_infer_params": _InferParams,
            "pb_train_params": _TrainParams, "pb_train_result": _TrainResult,
            "pb_engine_params": _EngineParams, "pb_native_batch": _NativeBatch}


class LayoutError(ImportError):
    """A ctypes struct of this package does not match the loaded library's C struct."""


def _check_layout(cls, cname):
    """Raises LayoutError when ctypes class cls differs from C struct cname of the library."""
    try:
        layout = _lib.pb_struct_layout
    except AttributeError:
        raise LayoutError(
            f"pipebench: the library {library_path()} has no pb_struct_layout, so the layout of "
            f"{cname} cannot be checked: it is older than this Python package; use the library "
            "built from the same source (PIPEBENCH_LIBRARY, docs/python.md)") from None
    layout.restype = ctypes.c_size_t
    layout.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(_FieldLayout)),
                       ctypes.POINTER(ctypes.c_size_t)]
    fields = ctypes.POINTER(_FieldLayout)()
    n = ctypes.c_size_t(0)
    size = layout(cname.encode(), ctypes.byref(fields), ctypes.byref(n))
    where = f"python/pipebench/__init__.py {cls.__name__} against {cname} of {library_path()}"
    if size == 0:
        raise LayoutError(f"pipebench: {where}: the library does not describe {cname}")
    c = [(fields[i].name.decode(), fields[i].offset, fields[i].size) for i in range(n.value)]
    py = [(name, getattr(cls, name).offset, getattr(cls, name).size)
          for name, *_ in cls._fields_]
    problems = []
    for k in range(max(len(c), len(py))):
        cf = c[k] if k < len(c) else None
        pf = py[k] if k < len(py) else None
        if cf == pf:
            continue
        if cf is None:
            problems.append(f"field {pf[0]} (offset {pf[1]}, {pf[2]} bytes) is not in C")
        elif pf is None:
            problems.append(f"C field {cf[0]} (offset {cf[1]}, {cf[2]} bytes) is missing")
        else:
            problems.append(f"field {k}: {pf[0]} at offset {pf[1]}, {pf[2]} bytes here; "
                            f"{cf[0]} at offset {cf[1]}, {cf[2]} bytes in C")
    if ctypes.sizeof(cls) != size:
        problems.append(f"sizeof {ctypes.sizeof(cls)} here, {size} in C")
    if problems:
        more = f"; and {len(problems) - 2} more" if len(problems) > 2 else ""
        raise LayoutError(f"pipebench: {where} differ: " + "; ".join(problems[:2]) + more +
                          ". The package and the library come from different sources; "
                          "use the library built with this package (docs/python.md)")


for _cname, _cls in _STRUCTS.items():
    _check_layout(_cls, _cname)


from .bench import (BenchmarkConfig, read_results, run_benchmark_suite,  # noqa: E402
                    run_inference_benchmark)
