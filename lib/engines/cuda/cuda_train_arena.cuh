/* The training step's arena: the forward tensors and the backward pass's gradients, all placed
 * at creation (the step is planned once), in one range of device addresses reserved up front.
 * Physical memory is mapped into it (CUDA's virtual memory management, cuMemCreate/cuMemMap)
 * only up to the highest offset the plan reaches, so the device memory it holds is the plan's
 * own peak, rounded to the allocation granularity (2 MiB).
 *
 * Why: a buffer released by the plan (a layer's saved tensors once its backward is queued, a
 * gradient once consumed) goes back to a first-fit free list whose neighbours merge. The
 * forward tensors are placed in forward order, so the ones the backward pass has finished with
 * (the deepest layers first) form one growing free block, which holds the early layers' large
 * gradients. Whole buffers of fixed sizes (a pool) cannot: the deep layers' tensors are smaller
 * than the early layers' gradients. The pointers never move, so the plan's closures and the
 * CUDA graph keep them; nothing is released while the step runs, only while it is planned.
 *
 * The driver's entry points come through the runtime (cudaGetDriverEntryPointByVersion): no
 * link against libcuda. Where they are missing, the arena is off and every buffer is its own
 * cudaMalloc, as before (ct_arena.on == 0). */
#ifndef PIPEBENCH_CUDA_TRAIN_ARENA_CUH
#define PIPEBENCH_CUDA_TRAIN_ARENA_CUH

#include <cuda.h>
#include <cudaTypedefs.h>

#include <map>
#include <utility>
#include <vector>

#define CT_ARENA_ALIGN ((size_t)512) /* every buffer's offset: cuDNN and cuBLASLt want >= 16 */

struct ct_arena {
  int on = 0, dev = 0;
  CUdeviceptr base = 0;
  size_t reserved = 0, mapped = 0, high = 0, gran = 0;
  std::vector<std::pair<CUmemGenericAllocationHandle, size_t>> chunks;
  std::map<size_t, size_t> free_list; /* offset -> size, below high, neighbours merged */
  std::map<size_t, size_t> used;      /* offset -> size */
  PFN_cuMemAddressReserve_v10020 reserve = NULL;
  PFN_cuMemAddressFree_v10020 address_free = NULL;
  PFN_cuMemCreate_v10020 create = NULL;
  PFN_cuMemRelease_v10020 release = NULL;
  PFN_cuMemMap_v10020 map = NULL;
  PFN_cuMemUnmap_v10020 unmap = NULL;
  PFN_cuMemSetAccess_v10020 set_access = NULL;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = NULL;
  CUmemAllocationProp prop;
};

static void *arena_fn(const char *name) {
  void *f = NULL;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return NULL;
  return f;
}

/* Turns the arena on where the driver offers virtual memory management (else leaves it off:
 * not an error). PIPEBENCH_CUDA_ARENA=0 keeps it off. */
static void arena_init(ct_arena *a, int dev) {
  const char *env = getenv("PIPEBENCH_CUDA_ARENA");
  if (env && *env && atoi(env) == 0) return;
  a->dev = dev;
  a->reserve = (PFN_cuMemAddressReserve_v10020)arena_fn("cuMemAddressReserve");
  a->address_free = (PFN_cuMemAddressFree_v10020)arena_fn("cuMemAddressFree");
  a->create = (PFN_cuMemCreate_v10020)arena_fn("cuMemCreate");
  a->release = (PFN_cuMemRelease_v10020)arena_fn("cuMemRelease");
  a->map = (PFN_cuMemMap_v10020)arena_fn("cuMemMap");
  a->unmap = (PFN_cuMemUnmap_v10020)arena_fn("cuMemUnmap");
  a->set_access = (PFN_cuMemSetAccess_v10020)arena_fn("cuMemSetAccess");
  a->granularity = (PFN_cuMemGetAllocationGranularity_v10020)arena_fn("cuMemGetAllocationGranularity");
  cudaGetLastError();
  if (!a->reserve || !a->address_free || !a->create || !a->release || !a->map || !a->unmap ||
      !a->set_access || !a->granularity)
    return;
  memset(&a->prop, 0, sizeof a->prop);
  a->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  a->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a->prop.location.id = dev;
  if (a->granularity(&a->gran, &a->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
      a->gran == 0)
    return;
  size_t fr = 0, tot = 0;
  if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  /* addresses are cheap: room for twice the device's memory */
  a->reserved = (2 * tot + a->gran - 1) / a->gran * a->gran;
  if (a->reserve(&a->base, a->reserved, a->gran, 0, 0) != CUDA_SUCCESS) {
    a->base = 0;
    return;
  }
  a->on = 1;
}

static void arena_destroy(ct_arena *a) {
  if (!a->on) return;
  if (a->mapped) a->unmap(a->base, a->mapped);
  for (auto &c : a->chunks) a->release(c.first);
  a->address_free(a->base, a->reserved);
  a->chunks.clear();
  a->on = 0;
}

/* Maps physical memory up to offset need (a multiple of the granularity past it). */
static int arena_map_to(ct_arena *a, size_t need, struct pb_error *err) {
  if (need <= a->mapped) return 0;
  size_t add = (need - a->mapped + a->gran - 1) / a->gran * a->gran;
  if (a->mapped + add > a->reserved)
    return pbc_err(err, PB_ENOMEM, "training: the plan needs more than %.0f MiB of device memory",
                   (double)a->reserved / 1048576.0);
  CUmemGenericAllocationHandle h;
  CUresult r = a->create(&h, add, &a->prop, 0);
  if (r != CUDA_SUCCESS) {
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    cudaGetLastError();
    return pbc_err(err, r == CUDA_ERROR_OUT_OF_MEMORY ? PB_ENOMEM : PB_EIO,
                   "training: activations and gradients need %.0f MiB more device memory (%.0f "
                   "MiB placed so far): %s (%.0f MiB free of %.0f MiB)",
                   (double)add / 1048576.0, (double)a->mapped / 1048576.0,
                   r == CUDA_ERROR_OUT_OF_MEMORY ? "out of device memory" : "cuMemCreate failed",
                   (double)fr / 1048576.0, (double)tot / 1048576.0);
  }
  if (a->map(a->base + a->mapped, add, 0, h, 0) != CUDA_SUCCESS) {
    a->release(h);
    return pbc_err(err, PB_EIO, "training: cuMemMap of %.0f MiB failed", (double)add / 1048576.0);
  }
  CUmemAccessDesc d;
  memset(&d, 0, sizeof d);
  d.location = a->prop.location;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (a->set_access(a->base + a->mapped, add, &d, 1) != CUDA_SUCCESS) {
    a->unmap(a->base + a->mapped, add);
    a->release(h);
    return pbc_err(err, PB_EIO, "training: cuMemSetAccess of %.0f MiB failed",
                   (double)add / 1048576.0);
  }
  a->chunks.push_back(std::make_pair(h, add));
  a->mapped += add;
  return 0;
}

/* A buffer of n bytes: the lowest free block that holds it, else the top of the arena. Zeroed. */
static void *arena_alloc(ct_arena *a, size_t n, struct pb_error *err, int *rc) {
  n = (n + CT_ARENA_ALIGN - 1) / CT_ARENA_ALIGN * CT_ARENA_ALIGN;
  if (n == 0) n = CT_ARENA_ALIGN;
  size_t off = a->high;
  for (auto it = a->free_list.begin(); it != a->free_list.end(); ++it) {
    if (it->second < n) continue;
    off = it->first;
    size_t left = it->second - n;
    a->free_list.erase(it);
    if (left) a->free_list[off + n] = left;
    break;
  }
  if (off == a->high) {
    /* a free block that ends at the top grows instead of leaving a hole below the new buffer */
    if (!a->free_list.empty()) {
      auto last = std::prev(a->free_list.end());
      if (last->first + last->second == a->high) {
        off = last->first;
        a->free_list.erase(last);
      }
    }
    if ((*rc = arena_map_to(a, off + n, err)) != 0) return NULL;
    a->high = off + n;
  }
  a->used[off] = n;
  void *p = (void *)(uintptr_t)(a->base + off);
  cudaMemset(p, 0, n);
  return p;
}

/* Gives p back (planning only: the plan's later buffers may take its place). */
static void arena_free(ct_arena *a, void *p) {
  if (p == NULL) return;
  size_t off = (size_t)((uintptr_t)p - a->base);
  auto u = a->used.find(off);
  if (u == a->used.end()) return;
  size_t n = u->second;
  a->used.erase(u);
  auto next = a->free_list.lower_bound(off);
  if (next != a->free_list.end() && off + n == next->first) {
    n += next->second;
    a->free_list.erase(next);
  }
  auto after = a->free_list.lower_bound(off);
  if (after != a->free_list.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == off) {
      prev->second += n;
      return;
    }
  }
  a->free_list[off] = n;
}

static int arena_owns(const ct_arena *a, const void *p) {
  uintptr_t q = (uintptr_t)p;
  return a->on && q >= a->base && q < a->base + a->reserved;
}

#endif
