// SimNPU: a PrivateUse1 backend on host memory, renamed "npu" from Python.
//
// What it provides (see docs/simnpu.md):
//  * an allocator with per-device statistics (allocated, peak) and a per-process cap that
//    raises c10::OutOfMemoryError (torch.OutOfMemoryError in Python), as torch_npu's does;
//  * a device guard (current device per thread, one default stream, host-clock events);
//  * native kernels for what cannot run through a CPU fallback: factories (empty,
//    empty_strided), copies between host and "device", views (they must alias), resize_
//    and set_;
//  * a boxed CPU fallback for every other op, which runs the CPU's kernel on the device
//    tensors' own memory (Note [A fallback without copies]), emits torch_npu's
//    CPU-fallback warning for the ops on a configurable list and raises "could not run"
//    for the ops on another;
//  * autocast kernels for AutocastPrivateUse1 (the lists CUDA uses).
#include <ATen/EmptyTensor.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_reshape_alias_cpu_dispatch.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/resize_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/unfold_cpu_dispatch.h>
#include <ATen/ops/view_as_complex_cpu_dispatch.h>
#include <ATen/ops/view_as_real_cpu_dispatch.h>
#include <ATen/ops/view_cpu_dispatch.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <map>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

namespace simnpu {

constexpr int kMaxDevices = 16;
constexpr size_t kBlock = 512;  // allocations are rounded like torch_npu's caching allocator
// Note [Fidelity allocator]: torch_npu's NPUCachingAllocator (docs/simnpu.md cites the
// commit): round_size() adds a 32-byte pad (AddPadSize: every SoC but Ascend950 on
// CANN >= 9.1.0) before rounding to kMinBlockSize (512); blocks of at most kSmallSize
// (1 MiB) come from 2 MiB segments (kSmallBuffer), up to kMinLargeAlloc (10 MiB) from
// 20 MiB ones (kLargeBuffer), larger ones from their own segment rounded to kRoundLarge
// (2 MiB) (get_allocation_size); a free block stays in its segment (cached, reserved)
// until empty_cache; and set_per_process_memory_fraction caps the *reserved* memory:
// alloc_block refuses when total_allocated_memory + segment > allowed_memory_maximum,
// after one retry that releases the cached segments. The simulator models the blocks and
// segments as offsets (the memory itself is still one host allocation per block).
constexpr int64_t kPad = 32;
constexpr int64_t kSmallSize = int64_t(1) << 20;
constexpr int64_t kSmallBuffer = int64_t(2) << 20;
constexpr int64_t kLargeBuffer = int64_t(20) << 20;
constexpr int64_t kMinLargeAlloc = int64_t(10) << 20;
constexpr int64_t kRoundLarge = int64_t(2) << 20;

struct Config {
  int device_count = 1;
  int64_t total_memory = int64_t(16) << 30;
  bool fidelity = true;   // Note [Fidelity allocator]; false: exact 512-byte blocks
  int64_t pad = kPad;     // bytes added before rounding (a fault changes it)
};
Config g_config;
thread_local int g_current_device = 0;

// ------------------------------------------------------------------------ allocator
struct Segment {
  int64_t size = 0;
  bool small = false;
  std::map<int64_t, std::pair<int64_t, bool>> blocks;  // offset -> (size, free)
};

struct Stats {
  int64_t allocated = 0;
  int64_t peak = 0;
  int64_t reserved = 0;
  int64_t reserved_peak = 0;
  int64_t cap = -1;  // bytes; -1: no cap
  int64_t num_ooms = 0;
  int64_t num_allocs = 0;
  int64_t num_segments = 0;
  int64_t next_segment = 0;
  std::map<int64_t, Segment> segments;  // id -> segment (fidelity mode only)
};
std::mutex g_stats_mutex;
std::array<Stats, kMaxDevices> g_stats;

// What account() counted for one allocation: its block's size and place.
struct Counted {
  int64_t size = 0;
  int64_t segment = -1;
  int64_t offset = 0;
};

struct Block {
  void* ptr;
  Counted counted;
  int device;
};

std::string format_bytes(int64_t n) {
  char buf[64];
  if (n >= (int64_t(1) << 30)) {
    snprintf(buf, sizeof(buf), "%.2f GiB", double(n) / double(int64_t(1) << 30));
  } else {
    snprintf(buf, sizeof(buf), "%.2f MiB", double(n) / double(1 << 20));
  }
  return buf;
}

int64_t round_size(int64_t nbytes) {
  if (!g_config.fidelity) {
    return (nbytes + int64_t(kBlock) - 1) / int64_t(kBlock) * int64_t(kBlock);
  }
  const int64_t size = nbytes + g_config.pad;
  if (size < int64_t(kBlock)) {
    return kBlock;
  }
  return int64_t(kBlock) * ((size + int64_t(kBlock) - 1) / int64_t(kBlock));
}

int64_t segment_size(int64_t size) {
  if (size <= kSmallSize) {
    return kSmallBuffer;
  }
  if (size < kMinLargeAlloc) {
    return kLargeBuffer;
  }
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

// Release the segments with no block in use (empty_cache; the OOM retry). Lock held.
void release_cached(Stats& stats) {
  for (auto it = stats.segments.begin(); it != stats.segments.end();) {
    const Segment& seg = it->second;
    if (seg.blocks.size() == 1 && seg.blocks.begin()->second.second) {
      stats.reserved -= seg.size;
      stats.num_segments -= 1;
      it = stats.segments.erase(it);
    } else {
      ++it;
    }
  }
}

// Best-fit free block of the right pool, split as torch_npu splits (small: a remainder
// of at least 512 bytes; large: more than 1 MiB). Lock held; false when none fits.
bool take_block(Stats& stats, int64_t size, Counted& out) {
  const bool small = size <= kSmallSize;
  Segment* best_seg = nullptr;
  int64_t best_id = -1, best_offset = 0, best_size = 0;
  for (auto& [id, seg] : stats.segments) {
    if (seg.small != small) {
      continue;
    }
    for (auto& [offset, block] : seg.blocks) {
      if (block.second && block.first >= size && (best_seg == nullptr || block.first < best_size)) {
        best_seg = &seg, best_id = id, best_offset = offset, best_size = block.first;
      }
    }
  }
  if (best_seg == nullptr) {
    return false;
  }
  const int64_t remaining = best_size - size;
  const bool split = small ? remaining >= int64_t(kBlock) : remaining > kSmallSize;
  const int64_t taken = split ? size : best_size;
  best_seg->blocks[best_offset] = {taken, false};
  if (split) {
    best_seg->blocks[best_offset + size] = {remaining, true};
  }
  out = Counted{taken, best_id, best_offset};
  return true;
}

[[noreturn]] void raise_oom(Stats& stats, int device, int64_t size, int64_t limit) {
  stats.num_ooms += 1;
  // torch_npu's wording: "NPU out of memory. Tried to allocate ..."
  TORCH_CHECK_WITH(OutOfMemoryError, false, "NPU out of memory. Tried to allocate ",
                   format_bytes(size), " (NPU ", device, "; ",
                   format_bytes(g_config.total_memory), " total capacity; ",
                   format_bytes(stats.allocated), " already allocated; ",
                   format_bytes(stats.reserved), " reserved in total by PyTorch; ",
                   format_bytes(limit), " allowed by set_per_process_memory_fraction) "
                   "[SimNPU]");
}

// Count an allocation of `nbytes` on `device`: a block (rounded, Note [Fidelity
// allocator]) in a reserved segment; past the cap or the capacity it raises torch_npu's
// out-of-memory error instead.
Counted account(int device, size_t nbytes) {
  const int64_t size = round_size(static_cast<int64_t>(nbytes));
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  Stats& stats = g_stats[device];
  const int64_t limit = stats.cap >= 0 ? stats.cap : g_config.total_memory;
  Counted counted{size, -1, 0};
  if (!g_config.fidelity) {
    if (stats.allocated + size > limit) {
      raise_oom(stats, device, size, limit);
    }
    stats.reserved += size;
  } else if (!take_block(stats, size, counted)) {
    const int64_t grow = segment_size(size);
    if (stats.reserved + grow > limit) {
      release_cached(stats);  // torch_npu retries once after freeing the cached blocks
    }
    if (stats.reserved + grow > limit) {
      raise_oom(stats, device, size, limit);
    }
    const int64_t id = stats.next_segment++;
    Segment& seg = stats.segments[id];
    seg.size = grow;
    seg.small = size <= kSmallSize;
    seg.blocks[0] = {grow, true};
    stats.reserved += grow;
    stats.num_segments += 1;
    take_block(stats, size, counted);
  }
  stats.allocated += counted.size;
  stats.num_allocs += 1;
  stats.peak = std::max(stats.peak, stats.allocated);
  stats.reserved_peak = std::max(stats.reserved_peak, stats.reserved);
  return counted;
}

// Uncount what account() counted on `device` (the memory is being freed): the block goes
// back to its segment, merged with free neighbours; the segment stays reserved.
void uncount(int device, const Counted& counted) {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  Stats& stats = g_stats[device];
  stats.allocated -= counted.size;
  if (counted.segment < 0) {
    stats.reserved -= counted.size;
    return;
  }
  auto found = stats.segments.find(counted.segment);
  if (found == stats.segments.end()) {
    return;
  }
  auto& blocks = found->second.blocks;
  auto it = blocks.find(counted.offset);
  if (it == blocks.end()) {
    return;
  }
  it->second.second = true;
  auto next = std::next(it);
  if (next != blocks.end() && next->second.second) {
    it->second.first += next->second.first;
    blocks.erase(next);
  }
  if (it != blocks.begin()) {
    auto prev = std::prev(it);
    if (prev->second.second) {
      prev->second.first += it->second.first;
      blocks.erase(it);
    }
  }
}

void delete_block(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  uncount(block->device, block->counted);
  c10::free_cpu(block->ptr);
  delete block;
}

struct SimAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    const int device = g_current_device;
    const c10::Device dev(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, dev);
    }
    const Counted counted = account(device, nbytes);
    void* ptr = c10::alloc_cpu(nbytes);
    auto* block = new Block{ptr, counted, device};
    return c10::DataPtr(ptr, block, &delete_block, dev);
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

SimAllocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

// --------------------------------------------------------------------- device guard
double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

struct SimGuardImpl final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.index() != old.index()) {
      setDevice(d);
    }
    return old;
  }

  c10::Device getDevice() const override {
    return c10::Device(c10::DeviceType::PrivateUse1,
                       static_cast<c10::DeviceIndex>(g_current_device));
  }

  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.is_privateuseone(), "SimNPU: expected an npu device, got ", d);
    TORCH_CHECK(d.index() >= 0 && d.index() < g_config.device_count, "Invalid device npu:",
                int(d.index()), ": SimNPU has ", g_config.device_count,
                " device(s) (HARNESS_SIMNPU_DEVICES)");
    g_current_device = d.index();
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < g_config.device_count) {
      g_current_device = d.index();
    }
  }

  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(g_config.device_count);
  }

  // Events: work is synchronous on the host, so an event is the host clock at record().
  void record(void** event, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {
    if (*event == nullptr) {
      *event = new double(0.0);
    }
    *static_cast<double*>(*event) = now_ms();
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<double*>(event);
  }

  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}

  double elapsedTime(void* begin, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(begin && end, "SimNPU: both events must be recorded before elapsed_time()");
    return *static_cast<double*>(end) - *static_cast<double*>(begin);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SimGuardImpl);

// ---------------------------------------------------------------- pinned host memory
// Page-locked host memory as torch_npu gives it: ordinary host memory whose blocks are
// remembered, so is_pinned() is true for them (DDP's reducer asserts it of the staging
// copy of its used-parameter map before a non-blocking copy to the device).
std::mutex g_pinned_mutex;
std::unordered_set<const void*> g_pinned;

void delete_pinned(void* ptr) {
  if (ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(ptr);
  }
  c10::free_cpu(ptr);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes > 0 ? c10::alloc_cpu(nbytes) : nullptr;
    if (ptr != nullptr) {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned.insert(ptr);
    }
    return {ptr, ptr, &delete_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

PinnedAllocator g_pinned_allocator;

// -------------------------------------------------------------------------- hooks
struct SimHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(g_config.device_count);
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(g_current_device);
  }
  void setCurrentDevice(c10::DeviceIndex d) const override { g_current_device = d; }
  // Random ops run on the host through the fallback, with the CPU generator.
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Device getDeviceFromPtr(void*) const override {
    return c10::Device(c10::DeviceType::PrivateUse1,
                       static_cast<c10::DeviceIndex>(g_current_device));
  }
  bool isPinnedPtr(const void* ptr) const override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    return g_pinned.count(ptr) > 0;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    c10::DeviceGuard guard(storage.device());
    c10::DataPtr fresh = g_allocator.allocate(newsize);
    const size_t keep = std::min(newsize, storage.nbytes());
    if (keep > 0 && storage.data() != nullptr) {
      std::memcpy(fresh.get(), storage.data(), keep);
    }
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
    storage.unsafeGetStorageImpl()->set_nbytes(newsize);
  }
};

SimHooks* g_hooks = nullptr;

// ------------------------------------------------------------------ native kernels
c10::DispatchKeySet key_set() { return c10::DispatchKeySet(c10::DispatchKey::PrivateUse1); }

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  const c10::Device dev = c10::device_or_default(device);
  TORCH_CHECK(dev.is_privateuseone(), "SimNPU empty: expected an npu device, got ", dev);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "SimNPU supports strided tensors only");
  c10::OptionalDeviceGuard guard;
  if (dev.has_index()) {
    guard.reset_device(dev);
  }
  return at::detail::empty_generic(size, &g_allocator, key_set(), c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  const c10::Device dev = c10::device_or_default(device);
  TORCH_CHECK(dev.is_privateuseone(), "SimNPU empty_strided: expected an npu device, got ",
              dev);
  c10::OptionalDeviceGuard guard;
  if (dev.has_index()) {
    guard.reset_device(dev);
  }
  return at::detail::empty_strided_generic(size, stride, &g_allocator, key_set(),
                                           c10::dtype_or_default(dtype));
}

// A CPU tensor aliasing the host memory of a (simulated) device tensor.
at::Tensor host_alias(const at::Tensor& t) {
  if (!t.is_privateuseone()) {
    return t;
  }
  if (t.numel() == 0 || t.storage().data() == nullptr) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kCPU));
  }
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(c10::kCPU));
}

// Note [A fallback without copies]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A simulated device's memory is host memory, so the fallback hands the CPU kernel host
// aliases of the device tensors (same memory, sizes, strides and offset: no copy), and
// the device takes over the memory of what the kernel returns (adopt()), counted by the
// allocator (cap, peak, OOM) as if it had been allocated there. at::native::cpu_fallback
// copied every input to the host and every output back: on a 2-core Xeon that tripled a
// 256x256 mm (0.19 -> 0.26 ms with one thread, pinned) and made a 256x1024 layer_norm
// 3.5x slower, so SimNPU's benchmarks timed the copies, not the kernels. An argument the
// op writes gets a host alias the kernel may resize (an out= argument): when it does,
// the result moves to host memory and is copied back, as the copying fallback did. Ops
// returning a view of an argument keep at::native::cpu_fallback (the view must be of the
// device tensor), as do ops without a device tensor argument.

struct Adopted {
  c10::Storage host;  // the CPU kernel's result storage, kept alive by the device tensor
  Counted size;
  int device;
};

void release_adopted(void* ctx) {
  auto* adopted = static_cast<Adopted*>(ctx);
  uncount(adopted->device, adopted->size);
  delete adopted;  // drops the host storage, which frees the memory
}

// A device tensor over the memory of `t`, a CPU result of the fallback. Memory not
// allocated by the CPU allocator (a view of an argument's alias) is copied instead.
at::Tensor adopt(const at::Tensor& t, const c10::Device& device) {
  if (!t.defined() || !t.is_cpu()) {
    return t;
  }
  const c10::Storage& host = t.storage();
  const c10::DataPtr& data = host.data_ptr();
  if (host.nbytes() == 0 || data.get() == nullptr ||
      data.get_deleter() != c10::GetDefaultCPUAllocator()->raw_deleter()) {
    return t.to(device);
  }
  const int index = device.has_index() ? device.index() : g_current_device;
  const Counted size = account(index, host.nbytes());
  auto* ctx = new Adopted{host, size, index};
  c10::DataPtr ptr(data.get(), ctx, &release_adopted,
                   c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index)));
  c10::Storage storage(c10::Storage::use_byte_size_t(), host.nbytes(), std::move(ptr),
                       &g_allocator, /*resizable=*/true);
  at::Tensor out = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), key_set(),
                                                            t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return out;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.is_cpu() || self.is_privateuseone(), "SimNPU copy from ", self.device());
  TORCH_CHECK(dst.is_cpu() || dst.is_privateuseone(), "SimNPU copy to ", dst.device());
  if (dst.numel() == 0) {
    return dst;
  }
  host_alias(dst).copy_(host_alias(self), non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(self.device());
  return at::cpu::resize_(self, size, memory_format);
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::cpu::as_strided(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::cpu::view(self, size);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::cpu::_reshape_alias(self, size, stride);
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::cpu::unfold(self, dimension, size, step);
}

at::Tensor view_as_real(const at::Tensor& self) { return at::cpu::view_as_real(self); }
at::Tensor view_as_complex(const at::Tensor& self) { return at::cpu::view_as_complex(self); }

at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage source, int64_t offset,
                                      c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::cpu::set_(self, source, offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  return at::cpu::set_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  // at::cpu::set_(self) would allocate its empty storage on the CPU.
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &g_allocator, true);
  return at::cpu::set_(self, storage, 0, {0}, {});
}

// Convolution picks a kernel by backend and routes unknown backends to the
// *_overrideable ops, which have no CPU-fallback-able default: run them on host aliases.
at::Tensor to_host(const at::Tensor& t) { return t.defined() ? host_alias(t) : t; }
at::Tensor to_device(const at::Tensor& t, const c10::Device& device) {
  return adopt(t, device);
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding,
                                    c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups) {
  std::optional<at::Tensor> host_bias;
  if (bias.has_value() && bias->defined()) {
    host_bias = to_host(*bias);
  }
  at::Tensor out = at::convolution(to_host(input), to_host(weight), host_bias, stride, padding,
                                   dilation, transposed, output_padding, groups);
  return to_device(out, input.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
    bool transposed, c10::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> output_mask) {
  std::vector<int64_t> bias_sizes = {weight.size(transposed ? 1 : 0) * (transposed ? groups : 1)};
  auto grads = at::convolution_backward(to_host(grad_output), to_host(input), to_host(weight),
                                        c10::IntArrayRef(bias_sizes), stride, padding, dilation,
                                        transposed, output_padding, groups, output_mask);
  const c10::Device device = input.device();
  return {to_device(std::get<0>(grads), device), to_device(std::get<1>(grads), device),
          to_device(std::get<2>(grads), device)};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution_overrideable);
  m.impl("convolution_backward_overrideable", convolution_backward_overrideable);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("resize_", resize_);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("unfold", unfold);
  m.impl("view_as_real", view_as_real);
  m.impl("view_as_complex", view_as_complex);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_", set_empty);
}

// ------------------------------------------------------------------ the CPU fallback
std::mutex g_ops_mutex;
std::unordered_set<std::string> g_fallback_ops;     // warn like torch_npu, then run on CPU
std::unordered_set<std::string> g_unsupported_ops;  // raise "could not run"
std::unordered_set<std::string> g_warned;
std::atomic<bool> g_op_lists{false};                // either list is non-empty

// Legacy ops that mutate arguments their schema does not mark as written (so
// at::native::cpu_fallback would not copy them back): those arguments are handed to the
// CPU kernel as host aliases, which it updates in place. {op name, argument indices}.
const std::vector<std::pair<std::string, std::vector<size_t>>> kUnmarkedMutations = {
    {"aten::native_batch_norm", {3, 4}},
    {"aten::batch_norm_update_stats", {1, 2}},
    {"aten::batch_norm_gather_stats_with_counts", {3, 4}},
};

void alias_unmarked_mutations(const std::string& full, const c10::OperatorHandle& op,
                              torch::jit::Stack* stack) {
  for (const auto& entry : kUnmarkedMutations) {
    if (entry.first != full) {
      continue;
    }
    const size_t num_args = op.schema().arguments().size();
    const size_t begin = stack->size() - num_args;
    for (size_t index : entry.second) {
      c10::IValue& value = (*stack)[begin + index];
      if (value.isTensor() && value.toTensor().defined() &&
          value.toTensor().is_privateuseone()) {
        value = c10::IValue(host_alias(value.toTensor()));
      }
    }
  }
}

// Whether an op can run on host aliases (Note [A fallback without copies]).
bool runs_on_aliases(const c10::FunctionSchema& schema) {
  for (const auto& ret : schema.returns()) {
    if (ret.alias_info() != nullptr && !ret.alias_info()->isWrite()) {
      return false;  // returns a view of an argument
    }
  }
  return true;
}

// A host alias the CPU kernel may also resize (an out= argument): its storage is the
// device tensor's memory, not owned, and growing it moves it to fresh host memory,
// which sync_written() then copies back.
at::Tensor writable_alias(const at::Tensor& t) {
  const c10::Storage& storage = t.storage();
  c10::DataPtr memory(storage.data_ptr().get(), c10::Device(c10::DeviceType::CPU));
  c10::Storage host(c10::Storage::use_byte_size_t(), storage.nbytes(), std::move(memory),
                    c10::GetDefaultCPUAllocator(), /*resizable=*/true);
  at::Tensor out = at::detail::make_tensor<c10::TensorImpl>(
      std::move(host), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return out;
}

// `value` with every device tensor in it replaced by a host alias (writable ones for an
// argument the op writes); the device of the first one found is kept in `device`.
c10::IValue to_aliases(const c10::IValue& value, bool written,
                       std::optional<c10::Device>& device) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (!t.defined() || !t.is_privateuseone()) {
      return value;
    }
    if (!device) {
      device = t.device();
    }
    return c10::IValue(written ? writable_alias(t) : host_alias(t));
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : value.toTensorList()) {
      out.push_back(to_aliases(c10::IValue(t), written, device).toTensor());
    }
    return c10::IValue(out);
  }
  if (value.isList()) {  // Tensor?[] (index's indices) and other generic lists
    c10::impl::GenericList list = value.toList();
    c10::impl::GenericList out(list.elementType());
    for (const c10::IValue& item : list) {
      out.push_back(to_aliases(item, written, device));
    }
    return c10::IValue(out);
  }
  return value;
}

// After the kernel: the device tensor `t` as its writable alias `host` left it.
void sync_written(const at::Tensor& t, const at::Tensor& host) {
  if (!t.defined() || !t.is_privateuseone()) {
    return;
  }
  if (host.storage().data_ptr().get() != t.storage().data_ptr().get()) {
    at::_copy_from_and_resize(host, t);  // resized into fresh host memory: copy it back
  } else if (!host.sizes().equals(t.sizes()) || !host.strides().equals(t.strides()) ||
             host.storage_offset() != t.storage_offset()) {
    t.unsafeGetTensorImpl()->set_sizes_and_strides(host.sizes(), host.strides(),
                                                   host.storage_offset());
  }
}

void sync_written(const c10::IValue& original, const c10::IValue& alias) {
  if (original.isTensor()) {
    sync_written(original.toTensor(), alias.toTensor());
  } else if (original.isTensorList()) {
    const auto devices = original.toTensorList();
    const auto hosts = alias.toTensorList();
    for (size_t i = 0; i < devices.size(); ++i) {
      sync_written(devices.get(i), hosts.get(i));
    }
  }
}

// `value` (a result of the CPU kernel) on `device`: its tensors adopted.
c10::IValue adopt_all(const c10::IValue& value, const c10::Device& device) {
  if (value.isTensor()) {
    return c10::IValue(adopt(value.toTensor(), device));
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : value.toTensorList()) {
      out.push_back(adopt(t, device));
    }
    return c10::IValue(out);
  }
  return value;
}

bool writes(const c10::Argument& arg) {
  return arg.alias_info() != nullptr && arg.alias_info()->isWrite();
}

// Runs the op's CPU kernel on host aliases of its device tensors; false (the stack as
// it was) when the op has no device tensor argument, so the copying fallback runs it.
bool alias_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t num_args = arguments.size();
  const size_t begin = stack->size() - num_args;
  std::optional<c10::Device> device;
  std::vector<c10::IValue> originals(stack->begin() + begin, stack->end());
  std::vector<c10::IValue> aliases;
  aliases.reserve(num_args);
  for (size_t i = 0; i < num_args; ++i) {
    aliases.push_back(to_aliases(originals[i], writes(arguments[i]), device));
  }
  if (!device) {
    return false;
  }
  std::copy(aliases.begin(), aliases.end(), stack->begin() + begin);
  c10::DeviceGuard guard(*device);
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  for (size_t j = 0; j < num_args; ++j) {
    if (writes(arguments[j])) {
      sync_written(originals[j], aliases[j]);
    }
  }
  const auto& returns = schema.returns();
  const size_t ret_begin = stack->size() - returns.size();
  for (size_t i = 0; i < returns.size(); ++i) {
    c10::IValue& result = (*stack)[ret_begin + i];
    const c10::AliasInfo* written = returns[i].alias_info();
    if (written == nullptr) {
      result = adopt_all(result, *device);
      continue;
    }
    // an in-place or out= op returns the argument it wrote: the device tensor
    bool found = false;
    for (size_t j = 0; j < num_args && !found; ++j) {
      const c10::AliasInfo* arg = arguments[j].alias_info();
      if (arg != nullptr && *arg == *written) {
        result = originals[j];
        found = true;
      }
    }
    TORCH_INTERNAL_ASSERT(found, "SimNPU fallback: ", schema.name(), " returns an alias of "
                          "no argument");
  }
  return true;
}

std::string full_name(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

// Note [Fallback warnings reach stderr only]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch_npu's TORCH_NPU_WARN (NPUException.h/.cpp: warn_()) hands the warning to a base
// c10::WarningHandler of its own, never to the handler torch installs for Python, so the
// CPU-fallback warning is a line on file descriptor 2 ("[W... ] Warning: CAUTION: ..."),
// never a Python warning; and warn_() prints nothing unless
// OptionsManager::ShouldPrintWarning(): TORCH_NPU_WARNING_DISABLE (or the deprecated
// TORCH_NPU_DISABLED_WARNING) is not 1, and RANK is unset or 0. Decided once per process,
// at the first warning (a static there too).
bool should_print_warning() {
  static const bool print = []() {
    const char* disabled = std::getenv("TORCH_NPU_WARNING_DISABLE");
    if (disabled == nullptr) {
      disabled = std::getenv("TORCH_NPU_DISABLED_WARNING");
    }
    if (disabled != nullptr && std::strtol(disabled, nullptr, 10) == 1) {
      return false;
    }
    const char* rank = std::getenv("RANK");
    const long id = rank != nullptr ? std::strtol(rank, nullptr, 10) : -1;
    return id == 0 || id == -1;
  }();
  return print;
}

// The configured op lists: refuse an op on the unsupported list, warn (once) for one on
// the fallback list.
void check_op_lists(const c10::OperatorHandle& op) {
  const std::string& base = op.schema().operator_name().name;
  const std::string full = full_name(op);
  bool warn = false;
  bool refuse = false;
  {
    std::lock_guard<std::mutex> lock(g_ops_mutex);
    if (!g_unsupported_ops.empty()) {
      refuse = g_unsupported_ops.count(full) > 0 || g_unsupported_ops.count(base) > 0;
    }
    if (!refuse && !g_fallback_ops.empty() &&
        (g_fallback_ops.count(full) > 0 || g_fallback_ops.count(base) > 0)) {
      warn = g_warned.insert(full).second;  // once per op and process, as torch_npu does
    }
  }
  TORCH_CHECK_NOT_IMPLEMENTED(!refuse, "Could not run '", full,
                              "' with arguments from the 'npu' backend. SimNPU lists it in "
                              "HARNESS_SIMNPU_UNSUPPORTED_OPS (a simulated missing kernel).");
  if (warn) {
    const std::string text = c10::str(
        "CAUTION: The operator '", full,
        "' is not currently supported on the NPU backend and will fall back to run on "
        "the CPU. This may have performance implications.");
    if (!g_config.fidelity) {
      TORCH_WARN(text);  // a Python warning where the caller is Python (not torch_npu's way)
    } else if (should_print_warning()) {
      // Note [Fallback warnings reach stderr only]
      static c10::WarningHandler base;
      base.process(c10::Warning(c10::UserWarning(), {__func__, __FILE__, __LINE__}, text, false));
    }
  }
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (g_op_lists.load(std::memory_order_relaxed)) {  // no name built per op without lists
    check_op_lists(op);
  }
  if (runs_on_aliases(op.schema()) && alias_fallback(op, stack)) {
    return;
  }
  alias_unmarked_mutations(full_name(op), op, stack);
  at::native::cpu_fallback(op, stack);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

// The fallback as the kernel of each of these ops: every op with a CPU kernel, but the
// listed fallback and unsupported ones (Note [A kernel for every CPU op] in
// harness/simnpu/__init__.py, which computes the list). So the dispatcher sees a kernel
// where the CPU has one, as torch_npu registers one per op it supports, and runs the
// CPU's kernel where a composite would otherwise win (native_layer_norm's math version,
// computed in fp16 step by step).
void route_to_cpu(const std::vector<std::string>& names) {
  static auto* library = new torch::Library(torch::Library::IMPL, "aten",
                                            c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const auto& name : names) {
    library->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
  }
}

// Note [Attention takes the CPU's kernel]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// scaled_dot_product_attention is a composite that asks a per-device stub which kernel to
// run; on a device without one it runs the math decomposition (bmm, softmax, bmm), which
// is neither what the CPU runs (its fused flash kernel) nor what torch_npu runs (its own
// fused kernel): a cpu -> SimNPU parity pair then differed in the attention's error
// balance by 4.6x, from the simulator alone. SimNPU answers the stub with the CPU's own
// choice (_fused_sdp_choice on host aliases), so the composite calls the CPU's fused op,
// which the fallback runs. (The stub's signature is torch 2.5's and later; SimNPU's
// hooks need a recent torch anyway: docs/simnpu.md.)
std::optional<at::Tensor> host_optional(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? std::optional<at::Tensor>(host_alias(*t)) : t;
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool enable_gqa) {
  return at::_fused_sdp_choice(host_alias(query), host_alias(key), host_alias(value),
                              host_optional(attn_mask), dropout_p, is_causal, scale, enable_gqa);
}

}  // namespace simnpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &simnpu::fused_sdp_choice);
}  // namespace at::native

// ------------------------------------------------------------------------- autocast
// The macros name types and policies unqualified: they expect namespace at::autocast.
namespace at::autocast {
namespace {
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define SIMNPU_KERNEL_LOW(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(SIMNPU_KERNEL_LOW)
#define SIMNPU_KERNEL_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(SIMNPU_KERNEL_FP32)
#define SIMNPU_KERNEL_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(SIMNPU_KERNEL_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define SIMNPU_KERNEL_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(SIMNPU_KERNEL_PROMOTE)
}
}  // namespace
}  // namespace at::autocast

namespace simnpu {

// ------------------------------------------------------------------- Python surface
void init(int device_count, int64_t total_memory) {
  TORCH_CHECK(device_count >= 1 && device_count <= kMaxDevices,
              "SimNPU: device count must be 1..", kMaxDevices, ", got ", device_count);
  TORCH_CHECK(total_memory > 0, "SimNPU: total memory must be positive");
  g_config.device_count = device_count;
  g_config.total_memory = total_memory;
  if (g_hooks == nullptr) {
    g_hooks = new SimHooks();
    at::RegisterPrivateUse1HooksInterface(g_hooks);
  }
}

void check_device(int device) {
  TORCH_CHECK(device >= 0 && device < g_config.device_count, "Invalid device npu:", device,
              ": SimNPU has ", g_config.device_count, " device(s)");
}

py::dict stats(int device) {
  check_device(device);
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  const Stats& s = g_stats[device];
  py::dict out;
  out["allocated_bytes.all.current"] = s.allocated;
  out["allocated_bytes.all.peak"] = s.peak;
  out["reserved_bytes.all.current"] = s.reserved;
  out["reserved_bytes.all.peak"] = s.reserved_peak;
  out["segment.all.current"] = s.num_segments;
  out["num_alloc_retries"] = 0;
  out["num_ooms"] = s.num_ooms;
  out["num_allocs"] = s.num_allocs;
  out["cap"] = s.cap;
  return out;
}

void reset_peak(int device) {
  check_device(device);
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats[device].peak = g_stats[device].allocated;
  g_stats[device].reserved_peak = g_stats[device].reserved;
}

void empty_cache(int device) {
  check_device(device);
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  release_cached(g_stats[device]);
}

// Fidelity mode (Note [Fidelity allocator], Note [Fallback warnings reach stderr only]),
// and the allocator's pad; set before the first allocation.
void set_fidelity(bool fidelity, int64_t pad) {
  TORCH_CHECK(pad >= 0, "SimNPU: the allocator pad must be >= 0, got ", pad);
  g_config.fidelity = fidelity;
  g_config.pad = pad;
}

void set_cap(int device, int64_t cap) {
  check_device(device);
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats[device].cap = cap;
}

void set_ops(const std::vector<std::string>& fallback, const std::vector<std::string>& unsupported) {
  std::lock_guard<std::mutex> lock(g_ops_mutex);
  g_fallback_ops = std::unordered_set<std::string>(fallback.begin(), fallback.end());
  g_unsupported_ops = std::unordered_set<std::string>(unsupported.begin(), unsupported.end());
  g_warned.clear();
  g_op_lists = !g_fallback_ops.empty() || !g_unsupported_ops.empty();
}

}  // namespace simnpu

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("init", &simnpu::init, "Configure device count and memory, register the hooks");
  m.def("device_count", []() { return simnpu::g_config.device_count; });
  m.def("total_memory", []() { return simnpu::g_config.total_memory; });
  m.def("current_device", []() { return simnpu::g_current_device; });
  m.def("set_device", [](int device) {
    simnpu::check_device(device);
    simnpu::g_current_device = device;
  });
  m.def("stats", &simnpu::stats, "Allocator statistics of one device");
  m.def("reset_peak", &simnpu::reset_peak);
  m.def("empty_cache", &simnpu::empty_cache, "Release the segments no block uses");
  m.def("set_fidelity", &simnpu::set_fidelity, "Fidelity mode and the allocator's pad");
  m.def("fidelity", []() { return simnpu::g_config.fidelity; });
  m.def("round_size", &simnpu::round_size, "The block size an allocation of n bytes takes");
  m.def("set_cap", &simnpu::set_cap, "Cap a device's allocations (bytes; -1 lifts the cap)");
  m.def("route_to_cpu", &simnpu::route_to_cpu, "Run these ops' CPU kernels, not composites");
  m.def("set_ops", &simnpu::set_ops, "Ops that warn like torch_npu's fallback / are refused");
}
